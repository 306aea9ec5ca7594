"""Shared fixtures: isolated user directories and started Hosts that are checked for leaks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from core.net import Host, Identity, NetConfig
from core.net.host.gate import AccessGate
from tests.support.leaks import assert_no_leaks, open_fd_count

# Short timeouts so that failure paths finish quickly in tests.
FAST = NetConfig(
    dial_timeout=2.0,
    handshake_timeout=2.0,
    call_timeout=10.0,
    close_grace=0.5,
)

MakeHost = Callable[..., Awaitable[Host]]


@pytest.fixture
def barnraise_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "barnraise-home"
    monkeypatch.setenv("BARNRAISE_HOME", str(home))
    return home


@pytest.fixture
async def make_host() -> AsyncIterator[MakeHost]:
    """Start Hosts on loopback; at the end close them all and fail on leaked tasks or sockets."""
    baseline = open_fd_count()
    made: list[Host] = []

    async def make(
        config: NetConfig = FAST,
        identity: Identity | None = None,
        access: AccessGate | None = None,
    ) -> Host:
        host = Host(identity or Identity.generate(), config, access=access)
        made.append(host)
        await host.start()
        return host

    yield make
    for host in made:
        await host.close()
    await assert_no_leaks(baseline)


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's shards and tokenizer, made once per test session (about 10 s): read-only."""
    from core.project import load_manifest
    from core.swarm.demo_data import DEMO_MANIFEST, prepare_demo_data

    root = tmp_path_factory.mktemp("demo-data")
    prepare_demo_data(load_manifest(DEMO_MANIFEST), root)
    return root
