"""A stranger's calls cannot spoil an expert that every trainer shares.

Tried as an attacker would, against a real ``ExpertServer`` on loopback: one ``backward`` whose
output gradients are NaN used to be accepted, after which every forward for every caller returned
NaN; a huge finite gradient moved the expert as far as a thousand honest calls; and weights that
became non-finite stayed so (and would have been served until a restart). A refused call is
evidence against its caller.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import torch

from core.moe.remote import RemoteExpert
from core.moe.server.backend import PoisonedCall
from core.moe.server.checkpoints import ExpertCheckpoints
from core.moe.server.events import ExpertsEvent, ExpertsReady
from core.moe.server.experts import ExpertSpec
from core.moe.server.hosted import HostedExpert, Served
from core.moe.server.runtime import ExpertHost, ExpertHostSettings, _recover
from core.moe.server.server import ExpertServer
from core.net.errors import InvalidRequestError
from core.project import parse_dmoe_manifest
from core.training.moderation.call_evidence import evidence_of_refusals
from core.trust.evidence import Evidence
from core.worker.bridge import TrainingBridge
from tests.conftest import MakeHost
from tests.support.small_dmoe import MANIFEST

UID = "ffn.0.0"
SPEC = ExpertSpec("ffn", 8, "adam", 0.01, 16)


def expert() -> HostedExpert:
    return HostedExpert.build(SPEC, UID, Served(), torch.device("cpu"))


@pytest.fixture
async def bridge() -> AsyncIterator[TrainingBridge]:
    bridge = TrainingBridge("poison-test")
    yield bridge
    await bridge.aclose()


@pytest.fixture
async def servers() -> AsyncIterator[list[ExpertServer]]:
    started: list[ExpertServer] = []
    yield started
    for server in started:
        await server.close()


async def served(
    make_host: MakeHost,
    bridge: TrainingBridge,
    backend: HostedExpert,
    servers: list[ExpertServer],
) -> tuple[ExpertServer, RemoteExpert]:
    server_host, caller_host = await make_host(), await make_host()
    server = ExpertServer(server_host, bridge, [backend])
    servers.append(server)
    await server.start()
    caller_host.add_addresses(server_host.peer_id, server_host.addresses)
    return server, RemoteExpert(caller_host, server_host.peer_id, UID, timeout=10)


async def test_a_nan_backward_is_refused_and_every_caller_still_gets_finite_outputs(
    make_host: MakeHost, bridge: TrainingBridge, servers: list[ExpertServer]
) -> None:
    backend = expert()
    server, remote = await served(make_host, bridge, backend, servers)
    x = torch.randn(4, 8)
    poison = torch.full((4, 8), float("nan"))
    with pytest.raises(InvalidRequestError, match="NaN or infinite"):
        await remote.backward([x], [poison])
    with pytest.raises(InvalidRequestError, match="NaN or infinite"):
        await remote.backward([x], [torch.full((4, 8), float("inf"))])
    with pytest.raises(InvalidRequestError, match="NaN or infinite"):
        await remote.forward([torch.full((4, 8), float("nan"))])
    outputs = (await remote.forward([torch.randn(256 // 16, 8)]))[0]
    assert bool(torch.isfinite(outputs).all())
    assert backend.updates == 0
    assert server.refused == 3
    assert {r.caller for r in server.refusals} == {remote.host.peer_id}


async def test_a_huge_gradient_moves_the_expert_no_further_than_a_clipped_one(
    make_host: MakeHost, bridge: TrainingBridge, servers: list[ExpertServer]
) -> None:
    attacked, reference = expert(), expert()
    _server, remote = await served(make_host, bridge, attacked, servers)
    x = torch.randn(4, 8)
    direction = torch.randn(4, 8)
    await remote.backward([x], [direction * 1e30])
    # what the same call does with every row at the clipping bound
    unit = direction / direction.norm(dim=1, keepdim=True) * SPEC.max_grad_norm
    reference.backward([x], [unit])
    for got, want in zip(attacked.module.parameters(), reference.module.parameters(), strict=True):
        assert torch.allclose(got, want, atol=1e-6)
    assert attacked.clipped_rows == 4


def test_a_step_whose_gradients_overflow_is_skipped() -> None:
    backend = expert()
    before = {k: v.clone() for k, v in backend.module.state_dict().items()}
    with pytest.raises(PoisonedCall, match="not finite"):
        backend.backward([torch.full((2, 8), 3e38)], [torch.ones(2, 8) * 0.1])
    assert backend.skipped_steps == 1
    assert backend.updates == 0
    for name, value in backend.module.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_weights_that_turn_non_finite_are_replaced_by_the_newest_checkpoint(
    tmp_path: Path,
) -> None:
    store = ExpertCheckpoints(tmp_path)
    backend = expert()
    backend.recover = lambda b: _recover(store, b)
    backend.backward([torch.randn(3, 8)], [torch.randn(3, 8) * 0.01])
    store.save(backend)
    saved = {k: v.clone() for k, v in backend.module.state_dict().items()}
    # a step that leaves non-finite weights, whatever the cause (an optimizer that overflows)
    weight = next(backend.module.parameters())
    backend.optimizer.step = lambda *_, **__: weight.data.fill_(float("nan"))  # type: ignore[method-assign,assignment]
    backend.backward([torch.randn(3, 8)], [torch.randn(3, 8) * 0.5])
    assert backend.recoveries == 1
    for name, value in backend.module.state_dict().items():
        assert torch.equal(value, saved[name]), name


async def test_poisoned_calls_to_a_running_server_become_evidence_against_the_caller(
    make_host: MakeHost,
) -> None:
    collected: list[Evidence] = []
    manifest = parse_dmoe_manifest(MANIFEST)
    evidence = evidence_of_refusals(
        manifest.project.name, collect=True, on_evidence=collected.extend
    )
    events: list[ExpertsEvent] = []
    server = ExpertHost(ExpertHostSettings(manifest, uids=(UID,), evidence=evidence), events.append)
    caller = await make_host()
    try:
        await server.start()
        ready = events[0]
        assert isinstance(ready, ExpertsReady)
        remote = RemoteExpert(caller, ready.address, UID, timeout=10)
        x = torch.randn(4, 8)
        for _ in range(2):
            with pytest.raises(InvalidRequestError, match="NaN or infinite"):
                await remote.backward([x], [torch.full((4, 8), float("nan"))])
        assert server.evidence is not None
        (signed,) = await server.evidence.flush()
        (found,) = await server.evidence.collect()  # read back from the DHT, as the backbone does
        assert found == signed
        assert (found.accused, found.value, found.reporter) == (
            caller.peer_id,
            2.0,
            server.host.peer_id,
        )
        assert f"backward of {UID}" in found.reason
        assert collected == [found]
    finally:
        await server.close(save=False)
