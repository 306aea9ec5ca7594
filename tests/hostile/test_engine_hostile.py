"""Attacks on the engine: wrong files, unbounded numbers and odd requests against a real
``barnraise engine`` process, each answered with a clear refusal while the engine keeps serving and
still stops (and frees its lock) when told.

Deadlines here are generous hang guards (the engine answers in milliseconds); the old engine never
answered at all, or answered only after reading gigabytes.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "resources" / "demo" / "project.toml"
ANSWER_GUARD = 10.0
"""Seconds an answer may take before the engine counts as stuck."""
POSIX = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs, devices and SIGTERM are POSIX")


@dataclass
class Engine:
    process: subprocess.Popen[str]
    home: Path
    port: int
    token: str

    def call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, Any] | None = None,
        *,
        timeout: float = ANSWER_GUARD,
    ) -> tuple[int, str, dict[str, Any]]:
        """(status, content type, JSON answer) of one request; a socket timeout if it hangs."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            sent = {"Authorization": f"Bearer {self.token}"} | (headers or {})
            if body is not None:
                sent.setdefault("Content-Type", "application/json")
            connection.request(method, path, body=body, headers=sent)
            response = connection.getresponse()
            raw = response.read()
            kind = response.getheader("Content-Type", "")
            is_json = kind.startswith("application/json")
            answer = json.loads(raw) if is_json else {"raw": raw.decode(errors="replace")}
            return response.status, kind, answer
        finally:
            connection.close()

    def attach(self, manifest: Path) -> tuple[int, dict[str, Any]]:
        status, _, answer = self.call(
            "POST", "/v1/projects", json.dumps({"manifest": str(manifest)}).encode()
        )
        return status, answer

    def rss(self) -> int:
        return int(psutil.Process(self.process.pid).memory_info().rss)


def _limit_memory() -> None:
    """The engine may use at most 3 GiB of address space: a refusal that comes only after reading
    a whole device would otherwise take the test machine's memory with it."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


@contextlib.contextmanager
def running_engine(home: Path) -> Iterator[Engine]:
    """``barnraise engine --headless`` for ``home``, once ready; killed afterwards if still there."""
    process = subprocess.Popen(
        [sys.executable, "-m", "core.cli.main", "engine", "--headless"],
        cwd=ROOT,
        env=os.environ | {"BARNRAISE_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_limit_memory if sys.platform.startswith("linux") else None,  # noqa: PLW1509
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("engine ready at http://127.0.0.1:"), line
        endpoint = json.loads((home / "run" / "engine.json").read_text())
        port = int(endpoint["url"].rsplit(":", 1)[1])
        yield Engine(process, home, port, endpoint["token"])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with running_engine(tmp_path / "home") as started:
        yield started


def _fifo(tmp_path: Path, name: str = "project.toml") -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


def _message(answer: dict[str, Any]) -> str:
    return str(answer["error"]["message"])


# ---- A: files that are not manifests --------------------------------------------------------------


@POSIX
def test_fifo_manifests_are_refused_at_once_and_starve_nothing(
    engine: Engine, tmp_path: Path
) -> None:
    fifo = _fifo(tmp_path)
    for _ in range(10):  # the old engine lost one of its executor's threads to each, for ever
        status, answer = engine.attach(fifo)
        assert status == 400
        assert "named pipe (FIFO), not a manifest file" in _message(answer)
    for path in ("/v1/diagnostics", "/v1/projects/offers", "/v1/state"):
        status, _, _ = engine.call("GET", path)
        assert status == 200, path
    status, answer = engine.attach(DEMO)  # and a real manifest is still read
    assert status == 200, answer
    assert answer["data"]["name"] == "barnraise-demo"


@POSIX
def test_devices_and_huge_files_are_refused_unread(engine: Engine, tmp_path: Path) -> None:
    engine.call("GET", "/v1/state")
    baseline = engine.rss()
    zero = tmp_path / "zero.toml"
    zero.symlink_to("/dev/zero")
    sparse = tmp_path / "huge.toml"
    with sparse.open("wb") as file:
        file.truncate(2 << 30)  # 2 GiB that take no disk
    status, answer = engine.attach(sparse)
    assert status == 400, answer
    assert "is too large (2,147,483,648 bytes; the limit is 1,048,576 bytes)" in _message(answer)
    status, answer = engine.attach(zero)
    assert status == 400, answer
    assert "is a device, not a manifest file" in _message(answer)
    assert engine.rss() < baseline + 200 * 2**20
    linked = tmp_path / "linked.toml"
    linked.symlink_to(DEMO)  # a link to a regular file is fine
    status, answer = engine.attach(linked)
    assert status == 200, answer


@POSIX
def test_sigterm_with_fifo_attaches_in_flight_stops_and_frees_the_lock(tmp_path: Path) -> None:
    home = tmp_path / "home"
    fifo = _fifo(tmp_path)
    with running_engine(home) as engine:
        # eight attaches at once, as the finding had them; nobody waits for their answers here
        callers = [
            threading.Thread(target=_attach_quietly, args=(engine, fifo), daemon=True)
            for _ in range(8)
        ]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(ANSWER_GUARD)
        engine.process.send_signal(signal.SIGTERM)
        assert engine.process.wait(ANSWER_GUARD) == 0
        assert not (home / "run" / "engine.json").exists()
    with running_engine(home) as second:  # the lock is free: a new engine starts
        status, _, _ = second.call("GET", "/v1/state")
        assert status == 200


def _attach_quietly(engine: Engine, fifo: Path) -> None:
    with contextlib.suppress(OSError):  # the old engine never answers; the socket times out
        engine.attach(fifo)


@POSIX
def test_a_process_with_threads_stuck_on_fifos_still_exits(tmp_path: Path) -> None:
    # what the engine's exit relies on, with threads truly stuck: one of a BlockingPool and one of
    # the loop's default executor, both opening a FIFO that nobody writes
    fifo = _fifo(tmp_path)
    code = textwrap.dedent(
        f"""
        import asyncio, sys
        from core.cli.exit_guard import leave_stuck_threads
        from core.util.blocking import BlockingPool

        async def main():
            pool = BlockingPool("stuck")
            loop = asyncio.get_running_loop()
            pool_call = asyncio.ensure_future(pool.run(open, {str(fifo)!r}))
            default_call = loop.run_in_executor(None, open, {str(fifo)!r})
            await asyncio.sleep(0.2)  # both threads get into open(): nothing tells when they have
            pool.close()
            default_call.cancel()
            try:
                await pool_call
            except Exception as exc:
                print(type(exc).__name__, flush=True)
            leave_stuck_threads(7, grace=1.0)
            return 7

        sys.exit(asyncio.run(main()))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=ANSWER_GUARD,
        check=False,
    )
    assert done.returncode == 7, done.stderr
    assert done.stdout.strip() == "PoolClosed"
    assert "exiting without them" in done.stderr


# ---- B: numbers without bounds --------------------------------------------------------------------


def test_settings_and_manifest_numbers_have_bounds(engine: Engine, tmp_path: Path) -> None:
    for values, words in [
        ({"idle_minutes": 1e308}, "idle_minutes must be 0 or more and at most 10080"),
        ({"idle_minutes": 10**400}, "idle_minutes must be a finite number"),
        ({"monthly_network_cap_mb": 1e12}, "monthly_network_cap_mb must be 0 or more and at most"),
        ({"leave_cores_free": 10**20}, "leave_cores_free must be 0 or more and at most 4096"),
        ({"window_start": "9" * 100_000}, "window_start must be at most 64 characters"),
    ]:
        status, _, answer = engine.call(
            "PATCH", "/v1/settings", json.dumps({"values": values}).encode()
        )
        assert status == 400, values
        assert words in _message(answer), answer
        assert len(_message(answer)) < 300  # the value is not echoed whole
    status, _, answer = engine.call("PATCH", "/v1/settings", b'{"values": {"idle_minutes": NaN}}')
    assert status == 400
    assert "finite" in _message(answer)
    status, _, answer = engine.call("GET", "/v1/settings")
    assert answer["data"]["values"]["idle_minutes"] == 3.0  # nothing was saved
    text = DEMO.read_text(encoding="utf-8")
    for key, huge, words in [
        ("target_batch_size", "100000000000000000000", "must be in [1, 16777216]"),
        ("allreduce_timeout", "1e300", "must be in (0.0, 3600.0]"),
    ]:
        manifest = tmp_path / f"{key}.toml"
        manifest.write_text(_set(text, key, huge), encoding="utf-8")
        status, answer = engine.attach(manifest)
        assert status == 400, answer
        assert f"{key}: {words}" in _message(answer)


def _set(text: str, key: str, value: str) -> str:
    lines = [
        f"{key} = {value}" if line.startswith(f"{key} =") else line for line in text.splitlines()
    ]
    assert f"{key} = {value}" in lines
    return "\n".join(lines) + "\n"


# ---- C and D: what the control API is sent --------------------------------------------------------


def test_plain_text_bodies_are_refused(engine: Engine) -> None:
    body = json.dumps({"values": {"idle_minutes": 9}}).encode()
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        status, content, answer = engine.call("PATCH", "/v1/settings", body, {"Content-Type": kind})
        assert status == 415, kind
        assert content.startswith("application/json")
        assert "Content-Type: application/json" in _message(answer)
    status, _, answer = engine.call("POST", "/v1/pause", b"{}", {"Content-Type": "text/plain"})
    assert status == 415
    status, _, answer = engine.call(
        "PATCH", "/v1/settings", body, {"Content-Type": "application/json; charset=utf-8"}
    )
    assert status == 200
    assert answer["data"]["values"]["idle_minutes"] == 9.0
    status, _, answer = engine.call("GET", "/v1/state")
    assert answer["data"]["user_paused"] is False  # the plain-text pause did not happen


def test_odd_headers_and_deep_bodies_are_clear_refusals(engine: Engine, tmp_path: Path) -> None:
    for header in ("Bearer é".encode("latin-1"), "Bearer \u00e9\u4e2d".encode()):
        status, content, answer = engine.call("GET", "/v1/state", headers={"Authorization": header})
        assert status == 401, header
        assert content.startswith("application/json")
        assert "Authorization" in _message(answer)
    deep = b"[" * 100_000 + b"]" * 100_000
    status, content, answer = engine.call("PATCH", "/v1/settings", deep)
    assert status == 400
    assert "nests deeper than" in _message(answer)
    within_parser = b'{"values": {"idle_minutes": ' + b"[" * 40 + b"]" * 40 + b"}}"
    status, _, answer = engine.call("PATCH", "/v1/settings", within_parser)
    assert status == 400
    assert "nests deeper than 32 levels" in _message(answer)
    nested = tmp_path / "nested.toml"
    nested.write_text("x = " + "[" * 50_000 + "]" * 50_000 + "\n", encoding="utf-8")
    dotted = tmp_path / "dotted.toml"
    dotted.write_text("a" + ".a" * 100_000 + " = 1\n", encoding="utf-8")
    for manifest, words in [
        (nested, "nested more than 16 levels"),
        (dotted, "more than 16 dotted"),
    ]:
        status, answer = engine.attach(manifest)
        assert status == 400, answer
        assert words in _message(answer)
    status, _, _ = engine.call("GET", "/v1/diagnostics")
    assert status == 200
