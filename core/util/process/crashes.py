"""CrashLog: a process's crashes written down where the user (and a bug report) will find them.

An exception nobody caught — on the main thread (``sys.excepthook``; under Qt, a slot's exception
lands there too), on another thread (``threading.excepthook``) or in a callback or task of an asyncio
loop (the loop's exception handler, ``watch``) — is logged at CRITICAL with its traceback, so it
reaches the process's rotating log. A fatal error that kills the interpreter (a segfault in a C
extension, an abort) cannot go through ``logging``: ``faulthandler`` dumps every thread's stack from
its signal handler onto a descriptor opened for that at the start, which must stay valid for the life
of the process — the descriptor of a rotating log does not (rotation closes it), so fatal errors go
to a file of their own beside the log (``app-crash.log``, ``engine-crash.log``), rotated when the
process starts.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from core.util.process.logfiles import OUTPUT_BACKUPS, OUTPUT_MAX_BYTES, rotate_if_over

LOGGER = "crash"
"""The logger crashes are written to (its records go wherever the root logger's handlers write)."""


class CrashLog:
    """Installs the hooks (``install``), and restores what was there before (``uninstall``)."""

    def __init__(self, fault_file: Path | None, *, logger: logging.Logger | None = None) -> None:
        self.fault_file = fault_file
        self.log = logger or logging.getLogger(LOGGER)
        self._faults: IO[str] | None = None
        self._previous: tuple[Any, Any, bool] | None = None

    def install(self) -> CrashLog:
        """Take over ``sys.excepthook``, ``threading.excepthook`` and ``faulthandler`` (to
        ``fault_file`` if it can be opened, else to stderr)."""
        if self._previous is not None:
            return self
        self._previous = (sys.excepthook, threading.excepthook, faulthandler.is_enabled())
        sys.excepthook = self.excepthook
        threading.excepthook = self.thread_excepthook
        if self.fault_file is not None:
            try:
                self.fault_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                rotate_if_over(self.fault_file, OUTPUT_MAX_BYTES, OUTPUT_BACKUPS)
                self._faults = self.fault_file.open("a", encoding="utf-8")
            except OSError as exc:
                self.log.warning(
                    "fatal errors go to stderr: cannot open %s: %s", self.fault_file, exc
                )
        if self._faults is not None:
            faulthandler.enable(self._faults, all_threads=True)
        elif sys.stderr is not None:
            faulthandler.enable(all_threads=True)
        return self

    def uninstall(self) -> None:
        if self._previous is None:
            return
        excepthook, thread_excepthook, faults_were_enabled = self._previous
        self._previous = None
        if sys.excepthook == self.excepthook:
            sys.excepthook = excepthook
        if threading.excepthook == self.thread_excepthook:
            threading.excepthook = thread_excepthook
        faulthandler.disable()
        if faults_were_enabled and sys.__stderr__ is not None:
            faulthandler.enable(sys.__stderr__, all_threads=True)  # as good as we can restore it
        if self._faults is not None:
            self._faults.close()
            self._faults = None

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Log the exceptions ``loop`` cannot hand to anyone (a failed callback, a task nobody
        awaited) with the others."""
        loop.set_exception_handler(loop_exception_handler)

    # ---- the hooks -------------------------------------------------------------------------------

    def excepthook(
        self,
        kind: type[BaseException],
        value: BaseException,
        traceback: TracebackType | None,
    ) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, value, traceback)
            return
        self.log.critical("uncaught exception", exc_info=(kind, value, traceback))

    def thread_excepthook(self, args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return  # a thread that exits on purpose
        name = args.thread.name if args.thread is not None else "?"
        if args.exc_value is None:
            self.log.critical("uncaught %s in thread %s", args.exc_type.__name__, name)
            return
        exc_info = (args.exc_type, args.exc_value, args.exc_traceback)
        self.log.critical("uncaught exception in thread %s", name, exc_info=exc_info)


def loop_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An asyncio loop's exception handler (``loop.set_exception_handler``): what the loop cannot
    hand to anyone (a failed callback, a task nobody awaited) logged at CRITICAL as a crash."""
    message = str(context.get("message") or "an asyncio callback failed")
    details = [f"{key}={value!r}" for key, value in context.items() if key not in _SHOWN]
    exception = context.get("exception")
    exc_info = (
        (type(exception), exception, exception.__traceback__)
        if isinstance(exception, BaseException)
        else None
    )
    text = f"uncaught exception on the event loop: {message}"
    if details:
        text += " (" + ", ".join(details) + ")"
    logging.getLogger(LOGGER).critical(text, exc_info=exc_info)


_SHOWN = frozenset({"message", "exception"})
