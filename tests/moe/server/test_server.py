"""ExpertServer on loopback Hosts: correct results, batching across callers, typed refusals, clean
shutdown (the make_host fixture fails the test on leaked tasks or sockets)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator

import pytest
import torch

from core.codecs import FP16
from core.moe.protocol import FORWARD, ExpertRequest
from core.moe.remote import RemoteExpert, call_expert
from core.moe.server.backend import ExpertBackend
from core.moe.server.server import ExpertServer
from core.net import Host
from core.net.errors import (
    InvalidRequestError,
    NotFoundError,
    ResourceExhaustedError,
    UnavailableError,
)
from core.worker.bridge import TrainingBridge
from tests.conftest import MakeHost
from tests.support.leaks import wait_until


def make_expert(uid: str, max_batch: int = 8) -> ExpertBackend:
    torch.manual_seed(sum(uid.encode()))
    module = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    optimizer = torch.optim.SGD(module.parameters(), lr=0.05)
    return ExpertBackend(uid, module, optimizer, input_shapes=[[4]], max_batch=max_batch)


@pytest.fixture
async def bridge() -> AsyncIterator[TrainingBridge]:
    bridge = TrainingBridge("moe-test")
    yield bridge
    await bridge.aclose()


async def serve(
    make_host: MakeHost,
    bridge: TrainingBridge,
    experts: list[ExpertBackend],
    *,
    max_queue: int | None = None,
    max_wait: float = 0.01,
) -> tuple[Host, ExpertServer]:
    host = await make_host()
    server = ExpertServer(host, bridge, experts, max_queue=max_queue, max_wait=max_wait)
    await server.start()
    return host, server


async def test_forward_and_backward_equal_local_computation(
    make_host: MakeHost, bridge: TrainingBridge
) -> None:
    expert = make_expert("ffn.0.1")
    reference = copy.deepcopy(expert.module)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05)
    host, server = await serve(make_host, bridge, [expert, make_expert("ffn.0.2")])
    client = await make_host()
    remote = RemoteExpert(client, host.addresses[0], "ffn.0.1")
    info = await remote.info()
    assert (info.inputs, info.outputs, info.max_batch) == ([[4]], [[3]], 8)

    x = torch.randn(5, 4)
    (out,) = await remote.forward([x])
    torch.testing.assert_close(out, reference(x))

    grad_out = torch.randn(5, 3)
    leaf = x.clone().requires_grad_(True)
    reference(leaf).backward(grad_out)
    ref_opt.step()
    (grad_x,) = await remote.backward([x], [grad_out])
    assert leaf.grad is not None
    torch.testing.assert_close(grad_x, leaf.grad)
    for mine, theirs in zip(expert.module.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)  # the server applied the same SGD step

    halves = RemoteExpert(client, host.addresses[0], "ffn.0.1", codec=FP16)
    (approx,) = await halves.forward([x])
    torch.testing.assert_close(approx, reference(x).detach(), rtol=2e-3, atol=2e-3)
    await server.close()


async def test_concurrent_calls_from_several_clients_share_one_batch(
    make_host: MakeHost, bridge: TrainingBridge
) -> None:
    expert = make_expert("ffn.1.0", max_batch=8)
    # max_wait far beyond the test: only a full batch of 8 samples can start the computation
    host, server = await serve(make_host, bridge, [expert], max_wait=600.0)
    clients = [await make_host(), await make_host()]
    inputs = [torch.randn(2, 4) for _ in range(4)]
    calls = [
        asyncio.ensure_future(
            call_expert(clients[i % 2], host.addresses[0], "ffn.1.0", "forward", [x])
        )
        for i, x in enumerate(inputs[:3])
    ]
    pool = server.pools["ffn.1.0", "forward"]
    await wait_until(lambda: pool.queued == 6 or pool.batches > 0)
    assert pool.batches == 0  # 6 of 8 samples wait: nothing has run yet
    last = await call_expert(clients[1], host.addresses[0], "ffn.1.0", "forward", [inputs[3]])
    results = [*(await asyncio.gather(*calls)), last]
    assert pool.batches == 1
    for x, (out,) in zip(inputs, results, strict=True):
        torch.testing.assert_close(out, expert.module(x).detach())
    await server.close()


async def test_full_queue_answers_busy_and_close_answers_the_waiting(
    make_host: MakeHost, bridge: TrainingBridge
) -> None:
    host, server = await serve(
        make_host, bridge, [make_expert("ffn.2.0")], max_queue=2, max_wait=600.0
    )
    client = await make_host()
    remote = RemoteExpert(client, host.addresses[0], "ffn.2.0")
    waiting = asyncio.ensure_future(remote.forward([torch.randn(2, 4)]))
    pool = server.pools["ffn.2.0", "forward"]
    await wait_until(lambda: pool.queued == 2)
    with pytest.raises(ResourceExhaustedError, match="busy"):
        await remote.forward([torch.randn(1, 4)])
    await server.close()
    with pytest.raises(UnavailableError):
        await waiting
    assert host.router.get(FORWARD.name) is None


async def raw_forward(client: Host, host: Host, request: ExpertRequest) -> None:
    """A request header written by hand (what a buggy or hostile caller could send), no data."""
    async with client.open_stream(host.addresses[0], FORWARD, request) as call:
        await call.result()


async def test_bad_requests_get_typed_errors_and_the_server_keeps_serving(
    make_host: MakeHost, bridge: TrainingBridge
) -> None:
    host, server = await serve(make_host, bridge, [make_expert("ffn.3.0", max_batch=4)])
    client = await make_host()
    target = host.addresses[0]
    with pytest.raises(NotFoundError, match="no expert"):
        await call_expert(client, target, "ffn.9.9", "forward", [torch.randn(2, 4)])
    with pytest.raises(InvalidRequestError, match="shapes"):
        await call_expert(client, target, "ffn.3.0", "forward", [torch.randn(2, 5)])
    with pytest.raises(InvalidRequestError, match="takes 1 to 4"):
        await call_expert(client, target, "ffn.3.0", "forward", [torch.randn(6, 4)])
    with pytest.raises(InvalidRequestError, match="float32"):
        await raw_forward(client, host, ExpertRequest("ffn.3.0", 2, "float64", 0, [[2, 4]]))
    huge = 1 << 40  # declared, never sent: refused before anything is allocated
    with pytest.raises(InvalidRequestError, match="takes 1 to 4"):
        await raw_forward(client, host, ExpertRequest("ffn.3.0", huge, "float32", 0, [[huge, 4]]))
    with pytest.raises(InvalidRequestError, match="codec"):
        await raw_forward(client, host, ExpertRequest("ffn.3.0", 2, "float32", 3, [[2, 4]]))
    with pytest.raises(InvalidRequestError, match="shapes"):  # backward without output grads
        await call_expert(client, target, "ffn.3.0", "backward", [torch.randn(2, 4)])

    (out,) = await call_expert(client, target, "ffn.3.0", "forward", [torch.randn(2, 4)])
    assert out.shape == (2, 3)
    assert all(pool.queued == 0 for pool in server.pools.values())
    await server.close()
