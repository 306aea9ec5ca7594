"""The generated backbone really starts: each unit's ExecStart, run from its WorkingDirectory with its
environment (and the password file), on loopback with free ports instead of the public ones.

The DHT node prints its address; the coordinator serves ``/info`` for the new project with its key
and the DHT node as bootstrap peer; the auxiliary peer logs in to it as the organizer, joins the DHT
node and says it is ready. Then SIGTERM stops each cleanly, as systemd would.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import signal
import socket
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.cli.main import build_parser
from core.organize.backbone import Program
from tests.organize.conftest import answers, make_project
from tests.organize.units import env_file, read_unit, systemd_path, systemd_words

STARTUP_TIMEOUT = 120.0  # seconds: the auxiliary peer loads torch and builds the model first


class Service:
    """One unit's command, started as systemd would start it, its stdout read line by line."""

    def __init__(self, folder: Path, program: Program, changes: dict[str, str], *extra: str):
        unit = read_unit(folder / "services" / f"{program.unit}.service")["Service"]
        command = systemd_words(unit["ExecStart"][0])
        for option, value in changes.items():  # public addresses and ports -> loopback, free ones
            command[command.index(option) + 1] = value
        env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
        for assignment in unit["Environment"]:
            name, value = systemd_words(assignment)[0].split("=", 1)
            env[name] = value
        for path in unit.get("EnvironmentFile", []):
            env.update(env_file(Path(systemd_path(path))))
        self.proc = subprocess.Popen(
            [*command, *extra],
            cwd=systemd_path(unit["WorkingDirectory"][0]),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def line(self, timeout: float = STARTUP_TIMEOUT) -> str:
        line = self.lines.get(timeout=timeout)
        if line is None:
            assert self.proc.stderr is not None
            raise AssertionError(f"exited {self.proc.wait()}: {self.proc.stderr.read()[-3000:]}")
        return line

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        finally:
            for pipe in (self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()


@pytest.fixture
def services() -> Iterator[list[Service]]:
    started: list[Service] = []
    yield started
    for service in reversed(started):
        if service.proc.poll() is None:
            service.proc.kill()
        service.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def dht_logs_in() -> bool:
    """Whether ``barnraise dht`` can hold a moderated project's pass (``--username``)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            build_parser("dht").parse_args(["dht", "--username", "someone"])
    except SystemExit:  # argparse: no such option
        return False
    return True


@pytest.mark.parametrize(
    "mode",
    [
        "open",
        pytest.param(
            "moderated",
            marks=pytest.mark.skipif(
                not dht_logs_in(),
                reason="barnraise dht cannot log in yet: a moderated project's peers refuse it",
            ),
        ),
    ],
)
def test_the_generated_backbone_starts_from_its_unit_files(
    tmp_path: Path, services: list[Service], mode: str
) -> None:
    port = free_port()
    folder = tmp_path / "the project"
    made = make_project(
        folder, answers("backbone", mode=mode, public_url=f"http://127.0.0.1:{port}")
    )
    coordinator_program, dht_program, aux_program = made.programs

    coordinator = Service(folder, coordinator_program, {"--host": "127.0.0.1"})
    services.append(coordinator)
    key = made.manifest.access.project_key
    assert coordinator.line() == (
        f"coordinator for backbone at http://127.0.0.1:{port}, project key {key}"
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/info", timeout=10) as response:
        info = json.load(response)
    assert (info["project"], info["project_key"], info["mode"]) == ("backbone", key, mode)
    assert info["bootstrap"] == list(made.manifest.network.initial_peers)

    dht = Service(folder, dht_program, {"--port": "0"}, "--host", "127.0.0.1")
    services.append(dht)
    dht_address = dht.line()  # in a moderated project: after its login, with its pass
    assert dht_address.endswith(made.manifest.network.initial_peers[0].rsplit("/p2p/", 1)[1])

    aux = Service(
        folder,
        aux_program,
        {"--port": "0"},
        "--host",
        "127.0.0.1",
        "--initial-peers",
        dht_address,
    )
    services.append(aux)
    ready = json.loads(aux.line())  # logged in as the organizer, joined through the DHT node
    assert (ready["event"], ready["role"]) == ("ready", "aux")

    for service in reversed(services):
        assert service.stop() == 0
