"""Crashes are written down: uncaught exceptions (main thread, other threads, the asyncio loop) reach
the log with their traceback, a fatal error's stacks reach the crash file, and uninstalling puts
the previous hooks back."""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import logging
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.util.process.crashes import LOGGER, CrashLog, loop_exception_handler


@pytest.fixture
def crash_log(tmp_path: Path) -> Iterator[CrashLog]:
    crashes = CrashLog(tmp_path / "logs" / "test-crash.log").install()
    try:
        yield crashes
    finally:
        crashes.uninstall()


def test_the_hooks_are_installed_and_put_back(tmp_path: Path) -> None:
    before = (sys.excepthook, threading.excepthook, faulthandler.is_enabled())
    crashes = CrashLog(tmp_path / "crash.log").install()
    assert sys.excepthook == crashes.excepthook
    assert threading.excepthook == crashes.thread_excepthook
    assert faulthandler.is_enabled()
    assert (tmp_path / "crash.log").exists()
    crashes.install()  # twice: no change
    crashes.uninstall()
    assert (sys.excepthook, threading.excepthook, faulthandler.is_enabled()) == before
    crashes.uninstall()  # twice: nothing


def test_an_uncaught_exception_is_logged_with_its_traceback(
    crash_log: CrashLog, caplog: pytest.LogCaptureFixture
) -> None:
    try:
        raise RuntimeError("the main thread broke")
    except RuntimeError as exc:
        with caplog.at_level(logging.CRITICAL, logger=LOGGER):
            sys.excepthook(type(exc), exc, exc.__traceback__)
    (record,) = caplog.records
    assert record.levelno == logging.CRITICAL
    assert record.exc_info is not None
    assert "the main thread broke" in caplog.text
    assert "Traceback" in caplog.text


def test_a_threads_uncaught_exception_is_logged(
    crash_log: CrashLog, caplog: pytest.LogCaptureFixture
) -> None:
    def fail() -> None:
        raise ValueError("a worker broke")

    with caplog.at_level(logging.CRITICAL, logger=LOGGER):
        worker = threading.Thread(target=fail, name="worker-7")
        worker.start()
        worker.join()
    assert "uncaught exception in thread worker-7" in caplog.text
    assert "ValueError: a worker broke" in caplog.text


def test_the_loops_unhandled_exceptions_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def broken() -> None:
        raise KeyError("nobody awaited this")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(loop_exception_handler)
        loop.call_soon(lambda: 1 / 0)
        ran = loop.create_future()
        loop.call_soon(ran.set_result, None)  # callbacks run in order: after the failing one
        await ran

    with caplog.at_level(logging.CRITICAL, logger=LOGGER):
        asyncio.run(main())
        loop = asyncio.new_event_loop()
        try:
            loop.set_exception_handler(loop_exception_handler)
            task = loop.create_task(broken())
            loop.run_until_complete(asyncio.wait([task]))  # which leaves its exception unread
            assert task.done()
            del task  # garbage: "Task exception was never retrieved"
            gc.collect()
        finally:
            loop.close()
    assert "uncaught exception on the event loop: Exception in callback" in caplog.text
    assert "ZeroDivisionError" in caplog.text
    assert "Task exception was never retrieved" in caplog.text
    assert "KeyError: 'nobody awaited this'" in caplog.text


def test_a_fatal_error_leaves_every_threads_stack_in_the_crash_file(tmp_path: Path) -> None:
    crash_file = tmp_path / "logs" / "engine-crash.log"
    script = textwrap.dedent(
        f"""
        import contextlib
        import faulthandler
        from pathlib import Path
        from core.util.process.crashes import CrashLog
        with contextlib.suppress(ImportError):  # no core dump left behind (POSIX)
            import resource
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        CrashLog(Path({str(crash_file)!r})).install()
        faulthandler._sigabrt()
        """
    )
    root = Path(__file__).resolve().parents[2]
    child = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, timeout=60, check=False
    )
    assert child.returncode != 0
    text = crash_file.read_text()
    assert "Fatal Python error: Aborted" in text
    assert "Current thread" in text or "Thread 0x" in text
