"""An engine with a ``dmoe`` project attached hosts experts under its scheduler, driven through the
control API: calls are answered while it runs, answered "busy" while it is paused (and its experts
are no longer announced), answered again after resume; the ledger counts the expert samples served;
detaching saves the experts' checkpoints in the project's folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.api import AttachRequest
from core.api.events import ErrorRaised
from core.engine.hosting import EXPERT_CHECKPOINTS
from core.engine.projects import NetworkChoice
from core.moe.remote import RemoteExpert
from core.moe.server.checkpoints import ExpertCheckpoints
from core.moe.server.runtime import ExpertHost
from core.net import Host, Identity
from core.net.errors import ResourceExhaustedError
from core.project import AnyManifest
from tests.conftest import FAST
from tests.support.engine import Running, until
from tests.support.leaks import wait_until

MANIFEST = """
[project]
name = "engine-dmoe"
kind = "dmoe"
[grid]
prefix = "ffn"
shape = [2, 2]
[expert]
kind = "linear"
hidden = 8
max_batch = 16
[server]
max_wait = 0.0
max_queue = 64
checkpoint_interval = 0.0
experts_per_server = 2
[trainer]
batch_size = 8
k = 2
beam_size = 2
"""


@pytest.fixture
def loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's peer listens on loopback only (tests never listen beyond it)."""

    def listen_settings(
        self: NetworkChoice, manifest: AnyManifest, *, local: bool
    ) -> dict[str, Any]:
        return {"listen": ("/ip4/127.0.0.1/tcp/0",), "port_fallback": False}

    monkeypatch.setattr(NetworkChoice, "listen_settings", listen_settings)


async def test_the_engine_hosts_experts_pauses_them_and_counts_what_they_served(
    engine: Running, tmp_path: Path, loopback: None
) -> None:
    manifest = tmp_path / "project.toml"
    manifest.write_text(MANIFEST, encoding="utf-8")
    client = engine.client
    info = await client.attach(AttachRequest(str(manifest), device="cpu"))
    assert info.name == "engine-dmoe"
    await client.set_settings({"max_other_cpu_percent": 100, "cpu_when_in_use": "pause"})
    await client.start()
    await until(client, lambda s: s.state == "running")
    runner = engine.daemon.engine.runner
    assert runner is not None
    experts = runner.peer
    assert isinstance(experts, ExpertHost)
    assert experts.address is not None
    assert len(experts.experts) == 2
    await wait_until(lambda: experts.announcing)

    uid = experts.experts[0].uid
    caller = Host(Identity.generate(), FAST)  # closed here: the engine fixture checks for leaks
    await caller.start()
    try:
        await _drive(engine, experts, RemoteExpert(caller, experts.address, uid, timeout=30))
    finally:
        await caller.close()
    await client.detach("engine-dmoe")  # stops the server: a last checkpoint of what learned
    folder = engine.daemon.engine.config.work_dir("engine-dmoe") / EXPERT_CHECKPOINTS
    (saved,) = ExpertCheckpoints(folder).files(uid)
    assert torch.load(saved, weights_only=True)["updates"] == 2
    # no scheduler tick failed while the server stopped (it takes a last checkpoint meanwhile)
    errors = [
        e.data for e in engine.daemon.engine.events.recent() if isinstance(e.data, ErrorRaised)
    ]
    assert errors == []


async def _drive(engine: Running, experts: ExpertHost, remote: RemoteExpert) -> None:
    client = engine.client
    x = torch.randn(3, 8)
    await remote.forward([x])
    await remote.backward([x], [torch.ones(3, 8)])
    # six samples served (three forward, three backward): metered, then written to the ledger
    await until(client, lambda s: s.progress.session_samples == 6)
    await wait_until(lambda: engine.daemon.engine.ledger.totals("engine-dmoe").samples == 6)

    paused = await client.pause()
    assert (paused.state, paused.code) == ("paused", "user_paused")
    await wait_until(lambda: not experts.control.running)
    assert not experts.announcing
    with pytest.raises(ResourceExhaustedError, match="busy: paused"):
        await remote.forward([x])
    with pytest.raises(ResourceExhaustedError, match="busy: paused"):
        await remote.backward([x], [torch.ones(3, 8)])
    assert experts.experts[0].updates == 1

    await client.resume()
    await until(client, lambda s: s.state == "running")
    await wait_until(lambda: experts.control.running and experts.announcing)
    await remote.backward([x], [torch.ones(3, 8)])
    await wait_until(lambda: engine.daemon.engine.ledger.totals("engine-dmoe").samples == 9)
    stats = await client.statistics("engine-dmoe", days=1)
    assert stats.totals.samples == 9  # the refused calls were not counted
    assert stats.totals.compute_seconds > 0
    assert stats.totals.bytes_received > 0
