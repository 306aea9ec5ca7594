"""The local swarm: a whole collaboration on this computer (``barnraise swarm``), and how the engine
finds and follows it.

- ``record``     ``LocalSwarm``: the record a running swarm leaves in the runtime folder (where to
  join it, its processes), written privately and atomically; ``running_swarms`` reads them and
  deletes stale ones (a stopped swarm, a reused pid).
- ``reader``     ``LocalSwarms``: the records as the engine last read them (offers, where a
  ``local_swarm`` project joins, processes the CPU sensor leaves out).
- ``follow``     ``SwarmFollower``: keeps the active project, and its account, on its swarm's current
  run; callback-based, it knows nothing of the engine.
- ``demo_data``  ``prepare_demo_data``: the demo corpus and tokenizer, written once; ``DEMO_MANIFEST``.
- ``children``   ``ChildProcess``: one peer (``barnraise peer|backbone``) as a detached OS process, its JSON
  events read from its stdout, stopped politely then firmly.
- ``moderated``  ``ModeratedSwarm``: a moderated run's coordinator, accounts and manifest copy, and its
  ``standings`` at the end.
- ``run``        ``LocalSwarmRun``: one run, from the data to the peers, the record and the metrics, and
  stopped in reverse; it reports to a ``SwarmOutput``.
- ``dmoe_run``   ``LocalDmoeRun``: a mixture-of-experts collaboration (``--project dmoe``): expert
  servers, then asynchronous trainers, their reports combined into one line every few seconds.
- ``accused``    the backbone's accusations, read from its log, named and tallied for the
  swarm's output (``--byzantine`` shows who the defences caught).
- ``byzantine``  ``Misbehaviour``: a trainer that misbehaves on purpose (gradients x1000, sign-flipped
  x10, noise, NaN, a lying reducer), installed through the training peer's ``Misbehaving`` seam: how
  ``--byzantine``, the tests and the benchmark show the defences.

The package sits between the engine (which imports the record, the reader and the follower) and the
account and coordinator layer. Only ``demo_data``, ``run`` (the data pipeline, inside functions) and
``byzantine`` load torch, and this module imports neither them nor ``moderated``: the engine process starts
without torch or the coordinator's server. The desktop app starts a swarm as ``barnraise swarm``,
through the command line, since it imports nothing of ``core`` but ``core.api``.
"""

from core.swarm.follow import SwarmFollower
from core.swarm.reader import LocalSwarms
from core.swarm.record import (
    LocalSwarm,
    LocalSwarmError,
    SwarmProcess,
    find_swarm,
    new_record,
    remove_swarm,
    running_swarms,
    swarm_file,
    swarm_pids,
    write_swarm,
)

__all__ = [
    "LocalSwarm",
    "LocalSwarmError",
    "LocalSwarms",
    "SwarmFollower",
    "SwarmProcess",
    "find_swarm",
    "new_record",
    "remove_swarm",
    "running_swarms",
    "swarm_file",
    "swarm_pids",
    "write_swarm",
]
