"""Noticing a new connection's first bytes without reading them, so a silent stranger costs a socket.

An accepted TCP connection waits here, its transport paused, until the dialer sends something (a
TLS ClientHello comes at once from a real peer). Only then does the Host start TLS, with its buffers
and its work. A connection that stays silent costs one socket and one selector entry, and is the first
to be dropped when handshakes crowd (``core.net.host.admission``).

asyncio has no public way to watch a transport's socket, so this registers a reader on the selector
loop directly (its transport removed its own while paused, and ``resume_reading`` replaces ours).
Other loops (the proactor loop on Windows) cannot watch sockets this way: there TLS starts at once.
"""

from __future__ import annotations

import asyncio
import os
import socket
from asyncio.selector_events import BaseSelectorEventLoop
from collections.abc import Callable

_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)


class Waiting:
    """A connection waiting for its first bytes (``when_readable``).

    Holds no reference cycle: a flood drops thousands of these a second, and what only the cyclic
    collector can free piles up between its rare full passes, scattering the long-lived objects
    allocated meanwhile over memory that can then never be returned to the OS.
    """

    def __init__(
        self, loop: BaseSelectorEventLoop, transport: asyncio.Transport, fd: int,
        callback: Callable[[bool], None],
    ) -> None:  # fmt: skip
        self._loop = loop
        self._transport = transport
        self._fd = fd
        self._callback: Callable[[bool], None] | None = callback

    def _watch(self) -> None:
        add: Callable[..., object] = self._loop._add_reader  # type: ignore[attr-defined]
        add(self._fd, self._ready)

    def _ready(self) -> None:
        self._unwatch()
        try:
            spoke = _peek(self._fd)
        except BlockingIOError:  # a spurious wake-up: keep waiting
            self._watch()
            return
        except OSError:
            spoke = False  # reset by the dialer
        callback, self._callback = self._callback, None
        if callback is not None:
            callback(spoke)

    def _unwatch(self) -> None:
        remove: Callable[[int], bool] = self._loop._remove_reader  # type: ignore[attr-defined]
        remove(self._fd)

    def stop(self) -> None:
        """Stop waiting (before the transport is closed)."""
        if self._callback is not None and not self._transport.is_closing():
            self._unwatch()
        self._callback = None

    def spoken(self) -> bool:
        """Whether bytes are there already, though the loop has not said so yet: connections
        accepted in one burst are admitted before any of them is polled, and a real peer among them
        must not be taken for a silent one."""
        if self._transport.is_closing():
            return False
        try:
            return _peek(self._fd)
        except OSError:  # nothing yet (BlockingIOError), or reset
            return False


def when_readable(transport: asyncio.Transport, callback: Callable[[bool], None]) -> Waiting | None:
    """Call ``callback(True)`` once the paused ``transport``'s socket has bytes to read, or
    ``callback(False)`` if the dialer hung up first (nothing to start TLS for).

    None when this loop cannot wait so: then start TLS at once.
    """
    loop = asyncio.get_running_loop()
    sock = transport.get_extra_info("socket")
    if sock is None or not isinstance(loop, BaseSelectorEventLoop) or transport.is_reading():
        return None
    waiting = Waiting(loop, transport, sock.fileno(), callback)
    waiting._watch()
    return waiting


def _peek(fd: int) -> bool:
    """Whether a byte waits on socket ``fd`` (False: the dialer closed), leaving it there for TLS.

    Through a duplicate descriptor: the transport's socket object does not offer ``recv``."""
    with socket.socket(fileno=os.dup(fd)) as view:
        return bool(view.recv(1, socket.MSG_PEEK | _DONTWAIT))
