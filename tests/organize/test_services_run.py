"""The generated backbone really starts: each unit's ExecStart, run from its WorkingDirectory with its
environment (and the password file), on loopback with free ports instead of the public ones.

The DHT node prints its address; the coordinator serves ``/info`` for the new project with its key
and the DHT node as bootstrap peer; the backbone logs in to it as the organizer, joins the DHT
node and says it is ready. Then SIGTERM stops each cleanly, as systemd would.

A project made with the defaults (the demo's data, moderated) is served whole by its coordinator:
``barnraise project check`` passes against it, and an engine joins by the coordinator's URL alone.
"""

from __future__ import annotations

import asyncio
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

from core.api import AttachRequest
from core.cli.main import main
from core.organize.backbone import Program
from core.project import load_manifest
from tests.organize.conftest import answers, make_project
from tests.organize.units import env_file, read_unit, systemd_path, systemd_words
from tests.support.engine import Running

STARTUP_TIMEOUT = 120.0  # seconds: the backbone loads torch and builds the model first


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


def download(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        data: bytes = response.read()
        return data


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.parametrize("mode", ["open", "moderated"])
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
    assert (ready["event"], ready["role"]) == ("ready", "backbone")

    for service in reversed(services):
        assert service.stop() == 0


async def test_a_project_made_with_the_defaults_is_checked_and_joined_by_its_url(
    engine: Running,
    services: list[Service],
    tmp_path: Path,
    demo_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The demo's data in the project's data/, served by the generated coordinator command: the
    project checks out against it, and an engine joins by the coordinator's URL alone."""
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    folder = tmp_path / "defaults"
    made = make_project(
        folder, answers("defaults", data=None, public_url=public), demo_cache=demo_data
    )
    assert made.manifest.access.mode == "moderated"  # the default
    coordinator = Service(folder, made.programs[0], {"--host": "127.0.0.1"})
    services.append(coordinator)
    await asyncio.to_thread(coordinator.line)  # listening

    manifest = str(folder / "project.toml")
    assert await asyncio.to_thread(main, ["project", "check", manifest, "--json"]) == 0
    checks = {c["what"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["data.sources[0]"]["message"] == "8 of 8 shards reachable"
    first = checks["data.sources[0].urls[0] first record"]
    assert (first["status"], first["message"][:19]) == ("ok", "jsonl, field 'text'")
    assert checks["data.tokenizer"]["status"] == "ok"  # real prose fills the 4096 rows

    key = made.manifest.access.project_key
    preview = await engine.client.preview_project(f"{public}/#key={key}")
    assert (preview.name, preview.key_source, preview.mode) == ("defaults", "url", "moderated")
    assert not any("cannot join" in note for note in preview.uses.notes)
    info = await engine.client.attach(AttachRequest(f"{public}/#key={key}", device="cpu"))
    assert (info.name, info.project_key) == ("defaults", key)
    copy = load_manifest(Path(info.manifest))
    served = f"{public}/data/"
    assert copy.data.sources[0].urls == tuple(
        f"{served}shards/shard-{i:05d}.jsonl.gz" for i in range(8)
    )
    assert copy.data.tokenizer == f"{served}tokenizer.json"
    tokenizer = await asyncio.to_thread(download, copy.data.tokenizer)
    assert tokenizer == (folder / "data" / "tokenizer.json").read_bytes()
    assert coordinator.stop() == 0
