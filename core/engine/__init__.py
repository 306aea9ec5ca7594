"""The engine: the long-running service that contributes for one user.

- ``engine``    Engine: built whole by ``Engine.open`` from the parts below, stopped by ``close``;
  the commands (named as the API's calls) handed to the parts, and the views.
- ``parts``     EngineParts: settings file, identity, local swarms, ledger, metering, loss curve,
  sensors and the ``BlockingPool`` where every blocking call of the engine runs (files, the
  keyring), opened together (closed again if one fails); ``Closing`` collects what fails to stop.
- ``errors``    the engine's own errors (invalid argument, unknown project, attached twice, no
  coordinator, settings not saved) and ``ShutdownIncomplete``, which lists what failed to stop.
- ``config``    EngineConfig: folders and timings of one engine process.
- ``store``     EngineFile: preferences, pause/snooze and attached projects in one TOML file.
- ``projects``  ProjectSlot (an attached project) and ProjectRunner (its peer, started lazily).
- ``attached``  AttachedProjects: the attached slots, the active one and its runner (attach, detach,
  switch, rebuild), and the account following the active project.
- ``scheduling`` Scheduling: the scheduler loop; the policy's decision carried out on the runner,
  the engine's state published when it changes.
- ``hosting``   RunningPeer, what the runner needs of a peer; and the expert server it runs for a
  ``dmoe`` project (``core.moe.server.runtime``), where the volunteer contributes by hosting
  experts.
- ``account``   Account: the login at the active project's coordinator, the keyring, the leaderboard,
  and the pass keeper whose AccessGate a moderated project's peer shows.
- ``metering``  Metering: the peer's running totals turned into ledger rows.
- ``progress``  ProgressMeter: the peer's totals metered now and then, progress and peers published.
- ``events``    EventBus: numbered typed events, kept for late joiners, fanned out in order.
- ``peer_events`` PeerEvents: the peer's typed events (``core.worker.events``) counted, recorded
  and published.
- ``credit``    LandedEpochs: this computer's landed epochs kept in the ledger (its own count of
  its work), and ``compare``: that count beside the coordinator's credit, epoch by epoch, and why
  they differ.
- ``history``   History: the collaboration's loss curve and the backbone's held-out evaluations
  per project (memory and the ledger's file).
- ``join/``     joining a project by its URL or a manifest file, and following its signed updates;
  what a project would use here; the projects offered to join.
- ``diagnostics`` versions, folders and the log's last lines for a bug report (no secrets).
- ``device``    DeviceChoice: what the active project trains on and why, found without torch when
  the engine opens (NVIDIA driver, Apple silicon, the installed torch); whether it uses a GPU.
- ``trying``    ModelTrial: "try the model", a volunteer's question answered by a CPU copy of the
  active trainer's replica (torch loaded only once that peer is ready), or why it cannot be.
- ``views``     the API's answers built from the engine's parts (statistics, progress, project info,
  a finished epoch); the settings' answer is ``core.api.settings``.

Demo swarms running on this computer are read and followed with ``core.swarm`` (``LocalSwarms``,
``SwarmFollower``). The GUI never imports this package; it talks to it through ``core.api`` and
the control server, whose one table (``core.control.errors``) turns the engine's errors into the
API's.
"""

from core.engine.config import EngineConfig
from core.engine.engine import Engine
from core.engine.errors import PartFailure, ShutdownIncomplete
from core.engine.events import EventBus
from core.engine.parts import Closing

__all__ = ["Closing", "Engine", "EngineConfig", "EventBus", "PartFailure", "ShutdownIncomplete"]
