"""Shared fixtures: isolated user directories, started Hosts that are checked for leaks, the demo's
data, and an engine daemon in this process."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from core.net import Host, Identity, NetConfig
from core.net.host.gate import AccessGate
from tests.support.leaks import assert_no_leaks, open_fd_count

if TYPE_CHECKING:
    from tests.support.engine import Running

# Short timeouts so that failure paths finish quickly in tests.
FAST = NetConfig(
    dial_timeout=2.0,
    handshake_timeout=2.0,
    call_timeout=10.0,
    close_grace=0.5,
)

MakeHost = Callable[..., Awaitable[Host]]


@pytest.fixture(scope="session", autouse=True)
def _no_real_user_folders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Whatever a test or its subprocesses forget to isolate lands in a temporary home, never in
    the user's own folders (which a later run would then restore from)."""
    before = os.environ.get("BARNRAISE_HOME")
    if before is None:
        os.environ["BARNRAISE_HOME"] = str(tmp_path_factory.mktemp("session-home"))
    yield
    if before is None:
        os.environ.pop("BARNRAISE_HOME", None)


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


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Running]:
    """A started engine daemon on loopback with scripted sensors, its own folders and an in-memory
    keyring, whose user has been away an hour (``tests.support.engine``); the engine's, the control
    server's and the organizer's tests drive it."""
    from tests.support.engine import running_engine  # the engine's imports, only when used

    async with running_engine(tmp_path / "home") as running:
        yield running


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``cuda`` skip, saying so, where torch has no CUDA GPU (CI, most laptops)."""
    marked = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not marked:
        return
    import torch  # only when a collected test needs to know

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (packaging/dev.py gpu-check runs it on one)")
    for item in marked:
        item.add_marker(skip)
