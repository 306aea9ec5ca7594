"""Keyboard and mouse idleness on X11, from the XScreenSaver extension through ctypes.

The display connection stays open between calls (opening one costs a round trip and a socket).
Xlib ends the whole process on a connection error, so before each query the socket is checked
for a closed server (the user logged out) and a dead connection is dropped without touching Xlib.
Under Wayland the X server only sees input to X11 windows, so the sensor declines there.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import selectors
import socket

from core.scheduler.sensor import PolledIdleSensor, Reading
from core.util.clock import SYSTEM_CLOCK, Clock


class _XScreenSaverInfo(ctypes.Structure):
    _fields_ = (
        ("window", ctypes.c_ulong),
        ("state", ctypes.c_int),
        ("kind", ctypes.c_int),
        ("til_or_since", ctypes.c_ulong),
        ("idle", ctypes.c_ulong),
        ("event_mask", ctypes.c_ulong),
    )


class X11IdleSensor(PolledIdleSensor):
    def __init__(self, *, retry_seconds: float = 30.0, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__()
        self._retry_seconds = retry_seconds
        self._clock = clock
        self._retry_at = 0.0
        self._failure = ""
        self._xlib: ctypes.CDLL | None = None
        self._xss: ctypes.CDLL | None = None
        self._display: int | None = None
        self._info: ctypes._Pointer[_XScreenSaverInfo] | None = None
        # watches the display's socket for the server closing it; a selector has no fd limit
        self._watch: selectors.BaseSelector | None = None

    def read(self) -> Reading[float]:
        if self._display is None:
            if self._clock.monotonic() < self._retry_at:
                return Reading(None, self._failure)
            failure = self._connect()
            if failure is not None:
                # opening a display is slow when it fails; the engine polls several times a second
                self._retry_at = self._clock.monotonic() + self._retry_seconds
                self._failure = failure
                return Reading(None, failure)
        assert self._xlib is not None
        assert self._xss is not None
        assert self._info is not None
        if not self._connection_alive():
            self._release()
            return Reading(None, "the connection to the X server was closed")
        root = self._xlib.XDefaultRootWindow(self._display)
        if not self._xss.XScreenSaverQueryInfo(self._display, root, self._info):
            return Reading(None, "the X server did not answer the screen-saver query")
        return Reading(self._info.contents.idle / 1000.0)

    def close(self) -> None:
        self._release()

    def _connect(self) -> str | None:
        """Open the display and check the extension; a note when that is not possible."""
        libraries = _environment_problem() or _load_libraries()
        if isinstance(libraries, str):
            return libraries
        xlib, xss = libraries
        display = xlib.XOpenDisplay(None)
        if not display:
            return f"cannot open the X display {os.environ.get('DISPLAY')!r}"
        event_base, error_base = ctypes.c_int(), ctypes.c_int()
        # querying without the extension would be an X error, which Xlib turns into exit()
        if not xss.XScreenSaverQueryExtension(
            display, ctypes.byref(event_base), ctypes.byref(error_base)
        ):
            xlib.XCloseDisplay(display)
            return "the X server has no XScreenSaver extension"
        info = xss.XScreenSaverAllocInfo()
        if not info:
            xlib.XCloseDisplay(display)
            return "out of memory for the screen-saver query"
        self._xlib, self._xss, self._display, self._info = xlib, xss, display, info
        self._watch = selectors.DefaultSelector()
        self._watch.register(xlib.XConnectionNumber(display), selectors.EVENT_READ)
        return None

    def _connection_alive(self) -> bool:
        """False when the server closed the socket; reads nothing Xlib expects."""
        assert self._xlib is not None
        assert self._watch is not None
        try:
            if not self._watch.select(0):
                return True
            # readable means data or end of file, so this peek cannot block
            fd = self._xlib.XConnectionNumber(self._display)
            with socket.socket(fileno=os.dup(fd)) as sock:
                return sock.recv(1, socket.MSG_PEEK) != b""
        except OSError:
            return False

    def _release(self) -> None:
        """Close the display; a dead one only gets its socket closed, since Xlib would exit()."""
        if self._display is None or self._xlib is None or self._watch is None:
            return
        alive = self._connection_alive()
        self._watch.close()
        if alive:
            self._xlib.XCloseDisplay(self._display)
        else:
            os.close(self._xlib.XConnectionNumber(self._display))
        self._xlib.XFree(self._info)
        self._display = None
        self._info = None
        self._watch = None
        self._retry_at = 0.0


def _environment_problem() -> str | None:
    if os.environ.get("WAYLAND_DISPLAY") or os.environ.get("XDG_SESSION_TYPE") == "wayland":
        return "this is a Wayland session, where X11 sees only input to X11 windows"
    if not os.environ.get("DISPLAY"):
        return "no X display ($DISPLAY is not set)"
    return None


def _load_libraries() -> tuple[ctypes.CDLL, ctypes.CDLL] | str:
    """libX11 and libXss with their functions declared, or what is missing."""
    xlib = _load("X11", "libX11.so.6")
    if xlib is None:
        return "libX11 is not installed"
    xss = _load("Xss", "libXss.so.1")
    if xss is None:
        return "libXss (the XScreenSaver client library) is not installed"
    _declare(xlib, xss)
    return xlib, xss


def _load(name: str, soname: str) -> ctypes.CDLL | None:
    path = ctypes.util.find_library(name) or soname
    try:
        return ctypes.CDLL(path)
    except OSError:
        return None


def _declare(xlib: ctypes.CDLL, xss: ctypes.CDLL) -> None:
    """Argument and result types; without them ctypes would truncate 64-bit pointers."""
    display = ctypes.c_void_p
    xlib.XOpenDisplay.argtypes = (ctypes.c_char_p,)
    xlib.XOpenDisplay.restype = display
    xlib.XCloseDisplay.argtypes = (display,)
    xlib.XDefaultRootWindow.argtypes = (display,)
    xlib.XDefaultRootWindow.restype = ctypes.c_ulong
    xlib.XConnectionNumber.argtypes = (display,)
    xlib.XConnectionNumber.restype = ctypes.c_int
    xlib.XFree.argtypes = (ctypes.c_void_p,)
    xss.XScreenSaverQueryExtension.argtypes = (
        display,
        ctypes.POINTER(ctypes.c_int),
        ctypes.POINTER(ctypes.c_int),
    )
    xss.XScreenSaverAllocInfo.restype = ctypes.POINTER(_XScreenSaverInfo)
    xss.XScreenSaverQueryInfo.argtypes = (
        display,
        ctypes.c_ulong,
        ctypes.POINTER(_XScreenSaverInfo),
    )
    xss.XScreenSaverQueryInfo.restype = ctypes.c_int
