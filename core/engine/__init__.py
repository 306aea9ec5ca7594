"""The engine: the long-running service that contributes for one user.

- ``engine``    Engine: ordered start and stop of its parts, the scheduler loop, commands, views.
- ``config``    EngineConfig: folders and timings of one engine process.
- ``store``     EngineFile: preferences, pause/snooze and attached projects in one TOML file.
- ``projects``  ProjectSlot (an attached project) and ProjectRunner (its peer, started lazily).
- ``account``   Account: the login at the active project's coordinator, the keyring, the leaderboard,
  and the pass keeper whose AccessGate a moderated project's peer shows.
- ``metering``  Metering: the peer's running totals turned into ledger rows.
- ``events``    EventBus: numbered typed events, kept for late joiners, fanned out in order.
- ``peer_events`` PeerEvents: the peer's typed events (``core.training.events``) counted, recorded
  and published.
- ``history``   History: the collaboration's loss curve per project (memory and the ledger's file).
- ``local_swarms`` LocalSwarms: the demo swarms running on this computer, as last read.
- ``swarm_follow`` SwarmFollower: keeps the active project, and its account, on its swarm's
  current run.
- ``offers``    project offers: running local swarms first, then attached projects.
- ``diagnostics`` versions, folders and the log's last lines for a bug report (no secrets).
- ``views``     the API's answers built from the engine's parts (statistics, progress, project info,
  a finished epoch); the settings' answer is ``core.api.settings``.

The GUI never imports this package; it talks to it through ``core.api`` and the control server.
"""

from core.engine.config import EngineConfig
from core.engine.engine import Engine
from core.engine.events import EventBus

__all__ = ["Engine", "EngineConfig", "EventBus"]
