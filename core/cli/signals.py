"""Stopping long-running commands cleanly on SIGINT and SIGTERM (Ctrl-C), on every platform."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any


def stop_on_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGINT or SIGTERM. On Windows the loop cannot take signal handlers: Ctrl-C
    arrives as KeyboardInterrupt instead, which ``run_command`` turns into a clean exit."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)


def run_command(main: Callable[[], Coroutine[Any, Any, int]], *, interrupted: int = 0) -> int:
    """Run a command's coroutine; Ctrl-C outside the loop's handlers exits with ``interrupted``."""
    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return interrupted
    finally:
        sys.stdout.flush()
