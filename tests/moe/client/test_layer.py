"""RemoteMixtureOfExperts on loopback expert servers against a local mixture of the same experts:
outputs, input and gate gradients, the experts' SGD updates; failed and slow experts excluded with
the weights renormalised; k_min and backward_k_min; the load-balancing loss."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, field

import pytest
import torch
from torch import Tensor, nn

from core.codecs import FP16
from core.moe.announce import announcement
from core.moe.client.beam_search import MoEBeamSearch
from core.moe.client.gating import StructuredGating
from core.moe.client.layer import (
    MoEError,
    RemoteMixtureOfExperts,
    TooFewExpertsError,
    balancing_loss,
)
from core.moe.grid import ExpertGrid
from core.moe.server.backend import ExpertBackend
from core.moe.server.experts import ExpertSpec
from core.moe.server.faults import ServerFaults
from core.moe.server.server import ExpertServer
from core.net import Host
from core.util.clock import FakeClock
from core.worker.bridge import TrainingBridge
from tests.conftest import MakeHost
from tests.moe.client.test_beam_search import FakeDHT

GRID = ExpertGrid("lin", (2, 3))
HIDDEN = 6
LR = 0.1
# no clipping: these tests compare the arithmetic with a local mixture
SPEC = ExpertSpec(
    kind="linear", hidden=HIDDEN, optimizer="sgd", lr=LR, max_batch=64, max_grad_norm=0.0
)


@dataclass
class Swarm:
    """Expert servers on loopback, a trainer's Host and bridge, and a fake DHT naming the servers."""

    make_host: MakeHost
    server_bridge: TrainingBridge
    bridge: TrainingBridge
    client: Host
    dht: FakeDHT = field(default_factory=FakeDHT)
    servers: list[ExpertServer] = field(default_factory=list)
    backends: dict[str, ExpertBackend] = field(default_factory=dict)

    async def serve(
        self,
        uids: list[str],
        *,
        announce: Collection[str] = (),
        faults: ServerFaults | None = None,
        max_wait: float = 0.005,
    ) -> ExpertServer:
        """A server of ``uids``, announced in the DHT with ``announce`` (uids it does not serve)."""
        host = await self.make_host()
        backends = [SPEC.backend(uid) for uid in uids]
        server = ExpertServer(host, self.server_bridge, backends, faults=faults, max_wait=max_wait)
        await server.start()
        self.servers.append(server)
        self.backends.update({b.uid: b for b in backends})
        address = str(host.addresses[0])
        for uid in [*uids, *announce]:
            await self.dht.store_many(announcement(GRID, [uid], address, 1e12, self.dht.peer_id))
        return server

    def layer(self, k: int, **options: object) -> RemoteMixtureOfExperts:
        torch.manual_seed(0)
        search = MoEBeamSearch(self.dht, GRID, clock=FakeClock())
        return RemoteMixtureOfExperts(
            hidden=HIDDEN,
            grid=GRID,
            host=self.client,
            bridge=self.bridge,
            search=search,
            k=k,
            beam_size=GRID.size,  # exact top-k, so the local reference chooses the same experts
            **options,  # type: ignore[arg-type]
        )

    async def on_worker(self, fn: Callable[[], object]) -> object:
        return await self.bridge.run(fn)


@pytest.fixture
async def swarm(make_host: MakeHost) -> AsyncIterator[Swarm]:
    server_bridge = TrainingBridge("experts")
    bridge = TrainingBridge("trainer", workers=2)
    swarm = Swarm(make_host, server_bridge, bridge, await make_host())
    yield swarm
    for server in swarm.servers:
        await server.close()
    await bridge.aclose()
    await server_bridge.aclose()


def local_moe(
    gate: StructuredGating,
    experts: dict[str, nn.Module],
    x: Tensor,
    k: int,
    *,
    answering: Collection[str],
    frozen: Collection[str] = (),
) -> Tensor:
    """The same mixture computed here: top-k of all announced experts by the gate, weights a
    softmax over the answering ones; ``frozen`` experts pass no gradient to ``x``."""
    uids = list(GRID.all_uids())
    scores = gate(x)
    coords = torch.tensor([GRID.parse(uid) for uid in uids])
    logits = sum(scores[d][:, coords[:, d]] for d in range(GRID.depth))
    assert isinstance(logits, Tensor)
    top = logits.topk(k, dim=1).indices
    outputs = []
    for uid in uids:
        if uid not in answering:
            outputs.append(torch.zeros(x.shape[0], HIDDEN))
        else:
            out = experts[uid](x.detach() if uid in frozen else x)
            outputs.append(out)
    stacked = torch.stack(outputs, dim=1)
    alive = torch.tensor([uid in answering for uid in uids])[top]
    weights = torch.softmax(logits.gather(1, top).masked_fill(~alive, float("-inf")), dim=1)
    chosen = stacked.gather(1, top[..., None].expand(-1, -1, HIDDEN))
    return (weights[..., None] * chosen).sum(dim=1)


@dataclass
class Run:
    """A layer and its local twin after one forward and backward of ``(out * r).sum()``."""

    out: Tensor
    x_grad: Tensor
    gate_grads: list[Tensor]
    ref_out: Tensor
    ref_x_grad: Tensor
    ref_gate_grads: list[Tensor]
    ref_experts: dict[str, nn.Module]


async def forward_backward(
    swarm: Swarm,
    layer: RemoteMixtureOfExperts,
    answering: Collection[str],
    *,
    frozen: Collection[str] = (),
    between: Callable[[], Awaitable[None]] | None = None,
) -> Run:
    """Forward and backward on a worker thread (``between`` runs on the loop in between); the
    same on a local copy of the gate and of the experts, with SGD applied to those."""
    torch.manual_seed(1)
    x = torch.randn(5, HIDDEN)
    r = torch.randn(5, HIDDEN)
    ref_gate = copy.deepcopy(layer.gate)
    ref_experts = {uid: SPEC.module(uid) for uid in GRID.all_uids()}  # seeded by uid: same start
    leaf = x.clone().requires_grad_(True)
    out = await swarm.bridge.run(layer, leaf)
    assert isinstance(out, Tensor)
    if between is not None:
        await between()
    await swarm.bridge.run(lambda: (out * r).sum().backward())

    ref_leaf = x.clone().requires_grad_(True)
    ref_out = local_moe(
        ref_gate, ref_experts, ref_leaf, layer.k, answering=answering, frozen=frozen
    )
    (ref_out * r).sum().backward()
    with torch.no_grad():
        for module in ref_experts.values():
            for param in module.parameters():
                if param.grad is not None:
                    param.sub_(LR * param.grad)
    assert leaf.grad is not None
    assert ref_leaf.grad is not None
    return Run(
        out.detach(),
        leaf.grad,
        [_grad(p) for p in layer.gate.parameters()],
        ref_out.detach(),
        ref_leaf.grad,
        [_grad(p) for p in ref_gate.parameters()],
        ref_experts,
    )


def _grad(p: Tensor) -> Tensor:
    assert p.grad is not None
    return p.grad


def assert_close(a: Tensor, b: Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def assert_same_run(run: Run) -> None:
    assert_close(run.out, run.ref_out)
    assert_close(run.x_grad, run.ref_x_grad)
    for mine, theirs in zip(run.gate_grads, run.ref_gate_grads, strict=True):
        assert_close(mine, theirs)


def assert_experts_updated_like(swarm: Swarm, run: Run, uids: Collection[str]) -> None:
    for uid in uids:
        remote = swarm.backends[uid].module.parameters()
        for mine, theirs in zip(remote, run.ref_experts[uid].parameters(), strict=True):
            assert_close(mine.detach(), theirs.detach())


async def test_outputs_and_gradients_equal_a_local_mixture_of_the_same_experts(
    swarm: Swarm,
) -> None:
    await swarm.serve(["lin.0.0", "lin.0.1", "lin.0.2"])
    await swarm.serve(["lin.1.0", "lin.1.1", "lin.1.2"])
    layer = swarm.layer(k=3)
    everyone = list(GRID.all_uids())
    run = await forward_backward(swarm, layer, everyone)
    assert_same_run(run)
    # the servers stepped SGD in backward with exactly the local gradients: the same new weights
    assert_experts_updated_like(swarm, run, everyone)
    updated = [uid for uid in everyone if swarm.backends[uid].updates]
    assert updated
    assert all(swarm.backends[uid].updates == 1 for uid in updated)
    stats = layer.stats.snapshot()
    # one call per chosen expert and direction, never one per row
    assert stats["calls"] == {"forward": len(updated), "backward": len(updated)}
    assert stats["failures"] == {"forward": {}, "backward": {}}
    assert layer.balancing_loss is not None
    assert layer.balancing_loss.requires_grad

    # fp16 on the wire: the same mixture within half precision
    halves = swarm.layer(k=3, codec=FP16)
    x = torch.randn(4, HIDDEN)
    exact = await swarm.bridge.run(layer, x)
    approx = await swarm.bridge.run(halves, x)
    assert isinstance(exact, Tensor)
    assert isinstance(approx, Tensor)
    torch.testing.assert_close(approx, exact, rtol=1e-2, atol=1e-2)


async def test_failed_unknown_and_slow_experts_are_excluded_and_weights_renormalised(
    swarm: Swarm,
) -> None:
    await swarm.serve(["lin.0.0", "lin.0.1", "lin.1.2"], announce=["lin.1.0"])  # 1.0: unknown
    await swarm.serve(["lin.0.2"], faults=ServerFaults(failure_rate=1.0))  # answers unavailable
    await swarm.serve(["lin.1.1"], max_wait=600.0)  # never computes a small batch: times out
    answering = ["lin.0.0", "lin.0.1", "lin.1.2"]
    layer = swarm.layer(k=6, k_min=3, forward_timeout=0.3)
    run = await forward_backward(swarm, layer, answering)
    assert_same_run(run)
    assert_experts_updated_like(swarm, run, answering)
    stats = layer.stats.snapshot()
    assert stats["failures"]["forward"] == {"unknown": 1, "unavailable": 1, "timeout": 1}
    assert stats["calls"] == {"forward": 6, "backward": 3}  # backward only to those that answered

    strict = swarm.layer(k=6, k_min=4, forward_timeout=0.3)
    with pytest.raises(TooFewExpertsError, match="only 3 expert") as caught:
        await swarm.bridge.run(strict, torch.randn(2, HIDDEN))
    assert (caught.value.phase, caught.value.answered, caught.value.needed) == ("forward", 3, 4)
    assert "timeout 1" in str(caught.value)
    assert strict.stats.too_few == 1


async def test_experts_that_fail_in_backward_give_no_input_gradient(swarm: Swarm) -> None:
    await swarm.serve(["lin.0.0", "lin.0.1", "lin.0.2"])
    leaving = await swarm.serve(["lin.1.0", "lin.1.1", "lin.1.2"])
    gone = ["lin.1.0", "lin.1.1", "lin.1.2"]
    strict = swarm.layer(k=6, backward_k_min=4)
    strict_out = await swarm.bridge.run(strict, torch.randn(3, HIDDEN, requires_grad=True))
    assert isinstance(strict_out, Tensor)
    layer = swarm.layer(k=6)
    run = await forward_backward(
        swarm, layer, list(GRID.all_uids()), frozen=gone, between=leaving.close
    )
    # the outputs and the gate's gradient still count the experts that answered the forward
    assert_same_run(run)
    assert_experts_updated_like(swarm, run, ["lin.0.0", "lin.0.1", "lin.0.2"])
    assert all(swarm.backends[uid].updates == 0 for uid in gone)
    assert sum(layer.stats.failures["backward"].values()) == 3

    # all six answered its forward, three its backward: fewer than backward_k_min
    with pytest.raises(TooFewExpertsError, match="backward: only 3 expert") as caught:
        await swarm.bridge.run(lambda: strict_out.sum().backward())
    assert (caught.value.phase, caught.value.answered, caught.value.needed) == ("backward", 3, 4)


async def test_too_few_live_experts_and_bad_settings_are_typed_errors(swarm: Swarm) -> None:
    await swarm.serve(["lin.0.1"])
    layer = swarm.layer(k=2, k_min=2)
    with pytest.raises(TooFewExpertsError, match="beam search found only 1"):
        await swarm.bridge.run(layer, torch.randn(2, HIDDEN))
    one = swarm.layer(k=2)  # k_min 1: a row may be served by its one live expert
    out = await swarm.bridge.run(one, torch.randn(2, HIDDEN))
    assert isinstance(out, Tensor)
    assert out.shape == (2, HIDDEN)
    with pytest.raises(MoEError, match=r"shape \[batch, 6\]"):
        await swarm.bridge.run(one, torch.randn(2, 5))
    with pytest.raises(RuntimeError, match="worker thread"):
        one(torch.randn(2, HIDDEN))  # on the loop's thread: refused, not deadlocked
    with pytest.raises(MoEError, match="k_min <= k"):
        swarm.layer(k=2, k_min=3)
    with pytest.raises(MoEError, match="backward_k_min"):
        swarm.layer(k=2, backward_k_min=3)


def test_balancing_loss_is_zero_for_a_uniform_gate_and_differentiable() -> None:
    uniform = [torch.zeros(8, 2), torch.zeros(8, 3)]
    assert float(balancing_loss(uniform)) == 0.0
    # every row on index 0 of each dimension: CV² of a one-hot over M indices is M - 1
    peaked = [torch.tensor([[50.0, 0.0]]).repeat(8, 1), torch.tensor([[50.0, 0, 0]]).repeat(8, 1)]
    assert float(balancing_loss(peaked)) == pytest.approx((2 - 1) + (3 - 1), rel=1e-4)
    # rows that disagree but cover the indices evenly are balanced too: it is the batch's load
    split = [torch.tensor([[9.0, -9.0], [-9.0, 9.0]]), torch.zeros(2, 3)]
    assert float(balancing_loss(split)) == pytest.approx(0.0, abs=1e-12)

    torch.manual_seed(3)
    scores = [torch.randn(16, 2, requires_grad=True), torch.randn(16, 3, requires_grad=True)]
    first = balancing_loss(scores)
    assert first.item() > 0
    for _ in range(50):  # descending it balances the gate
        loss = balancing_loss(scores)
        grads = torch.autograd.grad(loss, scores)
        assert all(bool(g.abs().sum() > 0) for g in grads) or loss.item() < 1e-9
        with torch.no_grad():
            for score, grad in zip(scores, grads, strict=True):
                score.sub_(2.0 * grad)
    assert balancing_loss(scores).item() < 0.1 * first.item()
