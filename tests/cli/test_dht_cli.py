"""``barnraise dht`` processes on loopback form a network that others bootstrap from."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.net import PeerAddress
from tests.cli.test_cli import barnraise


class Node:
    def __init__(self, home: Path, *args: str) -> None:
        env = dict(os.environ, BARNRAISE_HOME=str(home))
        self.proc = subprocess.Popen(
            [
                *barnraise(),
                "dht",
                "--new-identity",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--stdio-api",
                *args,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        self.address = self.proc.stdout.readline().strip()
        self._next = 0

    def call(self, **command: object) -> object:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self._next += 1
        self.proc.stdin.write(json.dumps({"id": self._next, **command}) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        assert reply["id"] == self._next
        assert reply["ok"], reply
        return reply["result"]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        finally:
            for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[Node]]:
    started: list[Node] = []
    yield started
    for node in started:
        if node.proc.poll() is None:
            node.proc.kill()
        node.stop()


def test_nodes_form_a_network_others_bootstrap_from(tmp_path: Path, nodes: list[Node]) -> None:
    first = Node(tmp_path)
    nodes.append(first)
    address = PeerAddress.parse(first.address)  # a full dialable address, PeerID included
    assert address.host == "127.0.0.1"
    assert address.port
    assert address.peer_id
    nodes.append(Node(tmp_path, "--initial-peers", first.address))
    nodes.append(Node(tmp_path, "--initial-peers", nodes[1].address))
    assert (
        nodes[2].call(op="store", key="shared", value=[1, 2], expiration=time.time() + 60) is True
    )
    assert nodes[0].call(op="get", key="shared")["value"] == [1, 2]  # type: ignore[index]
    assert nodes[1].call(op="stats")["routing_table_size"] == 2  # type: ignore[index]
    for node in nodes:
        assert node.stop() == 0


def test_ctrl_c_or_sigterm_stops_cleanly(tmp_path: Path, nodes: list[Node]) -> None:
    node = Node(tmp_path)
    nodes.append(node)
    node.proc.send_signal(signal.SIGINT)
    assert node.proc.wait(timeout=10) == 0


def test_unreachable_initial_peers_are_a_clear_error(tmp_path: Path) -> None:
    ghost = "/ip4/127.0.0.1/tcp/9/p2p/12D3KooWLttXkSTEwqpySAkmLPDo1Kd9zCU7kUdE21att7TLa9Wc"
    result = subprocess.run(
        [
            *barnraise(),
            "dht",
            "--new-identity",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--initial-peers",
            ghost,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, BARNRAISE_HOME=str(tmp_path)),
        check=False,
    )
    assert result.returncode == 1
    assert "could not reach any initial peer" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_dht_command_does_not_import_torch() -> None:
    code = "import sys, core.cli.dht.command, core.dht; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def _login_modules(names: object) -> list[str]:
    """What only a login needs: the coordinator client (aiohttp), the keyring, core.account."""
    assert isinstance(names, list | set)
    heavy = ("aiohttp", "keyring")
    return sorted(m for m in names if m.split(".")[0] in heavy or m.startswith("core.account"))


@pytest.mark.parametrize("command", ["dht", "peer", "aux", "experts"])
def test_the_options_of_commands_that_may_log_in_load_no_coordinator_client(command: str) -> None:
    """Their --help (and every run of an open project) starts without the login's modules; the
    login imports them itself (core.cli.access)."""
    code = (
        "import json, sys; from core.cli.main import build_parser; "
        f"build_parser({command!r}); print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    loaded = json.loads(done.stdout)
    assert f"core.cli.{'peer' if command == 'aux' else command}" in loaded
    assert _login_modules(loaded) == []


def test_an_open_projects_node_runs_without_the_coordinator_client(
    tmp_path: Path, nodes: list[Node], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # the node lists every import on stderr
    node = Node(tmp_path)
    nodes.append(node)
    assert node.call(op="get", key="nothing here", latest=True) is None
    _, err = node.proc.communicate(timeout=30)  # stdin closed: the node stops
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in err.splitlines()
        if line.startswith("import time:")
    }
    # (importlib's imports, such as main's of the command module itself, are not listed)
    assert {"core.cli.dht.stdio", "core.dht", "core.net"} <= imported
    assert _login_modules(imported) == []
