"""Leaving promptly once a long-running command has stopped, even with threads stuck in blocking calls.

Python waits for threads at two points on its way out, without a time limit: ``asyncio.run`` shuts
down the loop's default executor and joins its threads, and the interpreter joins every executor's
threads (and every non-daemon thread) before it exits. A thread stuck in a call that never returns
(a read from a FIFO, a keyring waiting on a password prompt, a DNS lookup) would hold the process
for ever, long after its work was saved and its lock released. ``leave_stuck_threads``, called on
the loop once the command has stopped, removes both waits: the loop gets a fresh default executor
(the old one's threads are no longer waited for), and a daemon thread ends the process with the
command's exit code should Python still be on its way out ``grace`` seconds later.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

EXIT_GRACE = 3.0
"""Seconds Python gets to exit by itself once the command has stopped."""


def leave_stuck_threads(code: int, *, grace: float = EXIT_GRACE) -> None:
    """Make sure the process exits with ``code`` within ``grace`` seconds of this call.

    Call it on the running loop, after the command's own stop (state saved, locks released):
    work still running in threads then is abandoned."""
    loop = asyncio.get_running_loop()
    # an empty executor in place of the old one: asyncio.run then waits for no thread of it
    loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
    watchdog = threading.Thread(
        target=_exit_later, args=(code, grace), name="exit-guard", daemon=True
    )
    watchdog.start()


def _exit_later(code: int, grace: float) -> None:
    threading.Event().wait(grace)  # returns only if the process has not exited meanwhile
    stuck = [
        t.name
        for t in threading.enumerate()
        if t is not threading.current_thread() and t is not threading.main_thread()
    ]
    message = f"still waiting for {len(stuck)} thread(s) ({', '.join(stuck) or 'none'})"
    with contextlib.suppress(Exception):  # best effort: the exit below must happen
        print(f"barnraise: {message}; exiting without them", file=sys.stderr)
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)
