"""The engine's control surface: what ``barnraise engine`` runs around the engine.

- ``server``  ControlServer: the control API (HTTP + websocket events) on 127.0.0.1, token-guarded;
  bodies only as ``application/json`` (else 415), nested at most 32 levels.
- ``errors``  the one table from the engine's errors to the API's (status and code), and a JSON 500
  with an error id, logged with its traceback, for anything unexpected.
- ``lock``    InstanceLock: one engine per user (an OS file lock that dies with its process).
- ``daemon``  EngineDaemon: lock, engine, server and endpoint file, opened in order (``open``),
  stopped in reverse; what failed to stop is reported.
"""

from core.control.daemon import EngineAlreadyRunning, EngineDaemon
from core.control.lock import AlreadyRunning, InstanceLock
from core.control.server import ControlServer

__all__ = [
    "AlreadyRunning",
    "ControlServer",
    "EngineAlreadyRunning",
    "EngineDaemon",
    "InstanceLock",
]
