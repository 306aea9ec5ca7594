"""Starting the engine and the demo swarm as detached children, for the app.

The helper itself is ``core.util.process.detached`` (dependency-free, at the bottom of the layers, so the
local swarm starts its peers with it too); it is named here because the app reaches ``core`` only
through ``core.api``.
"""

from core.util.process.detached import STOP_SIGNAL, kill_detached, start_detached

__all__ = ["STOP_SIGNAL", "kill_detached", "start_detached"]
