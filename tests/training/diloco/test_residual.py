"""What a diloco peer has not landed yet: its residual survives a round that computed nothing,
decays by its share with a sparse codec, and nothing of it is applied twice, even when a reducer
answered some members and not others."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.averaging.allreduce import AllReduce
from core.codecs.topk import top_k
from core.net.errors import NetError
from core.net.wire.rpc import CallContext
from core.net.wire.stream import Stream
from core.training.diloco.state import DilocoState
from core.training.state import TrainingState
from tests.training.diloco.conftest import MakeDPeer, end_rounds, settle


def flat(arrays: list[np.ndarray] | None) -> np.ndarray:
    return np.concatenate([a.reshape(-1) for a in arrays or []])


async def test_a_round_that_computed_nothing_keeps_the_residual_whole(
    make_dpeer: MakeDPeer,
) -> None:
    codec = top_k(0.05, 2)
    peers = [await make_dpeer(codec=codec, residual_decay=0.5) for _ in range(2)]
    await settle(peers)
    for seed, peer in enumerate(peers):
        await peer.train(3, seed=seed)
    await end_rounds(peers)
    idle, busy = peers
    kept = flat(idle.optimizer.diloco.residual).copy()
    assert np.any(kept)  # what top-k did not send waits
    await busy.train(2, seed=5)  # the idle one computes nothing this round
    await end_rounds(peers)
    assert [p.optimizer.epoch for p in peers] == [2, 2]
    # neither zeroed (it sent nothing, so nothing of it landed) nor decayed (no new work)
    np.testing.assert_array_equal(flat(idle.optimizer.diloco.residual), kept)


def test_the_residual_decays_by_its_share_before_a_rounds_work_joins() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    state = TrainingState(model, torch.optim.SGD(model.parameters(), lr=0.1))
    diloco = DilocoState(state, outer_lr=1.0, outer_momentum=0.0, overlap=True, sparse=True,
                         clip_norm=None, residual_decay=0.5)  # fmt: skip
    residual = [np.full_like(a, 2.0) for a in diloco.anchor]
    diloco.carry(residual)
    model(torch.ones(2, 4)).sum().backward()
    assert diloco.inner_step()
    params = list(model.parameters())
    work = [b - p.detach().numpy().reshape(-1) for b, p in zip(diloco.base, params, strict=True)]
    delta = diloco.end_round()
    for d, w in zip(delta, work, strict=True):
        np.testing.assert_allclose(d, 0.5 * 2.0 + w, rtol=1e-6)
    # a round that computed nothing adds it whole
    diloco.missed(delta)
    again = diloco.end_round(decay=False)
    for d, w in zip(again, work, strict=True):
        np.testing.assert_allclose(d, 0.5 * 2.0 + w, rtol=1e-6)


async def test_a_member_a_reducer_did_not_answer_takes_the_others_mean_and_its_data_once(
    make_dpeer: MakeDPeer,
) -> None:
    """The reducer of one part averages everyone's data there, then fails to answer one member
    (as a reducer killed while sending does). The others land that mean; the member keeps its
    own values there, which differ, so at the next round's end it takes the others' outer
    parameters. Its data in that part is in them already: it must not go out again."""
    peers = [await make_dpeer(lr=1.0, momentum=0.0) for _ in range(3)]
    await settle(peers)
    reducer, cut_off, other = peers
    cut_peer = cut_off.optimizer.links.averager.host.peer_id

    def refuse_one(runner: AllReduce) -> None:
        transfer = runner.transfer
        serve = transfer.serve
        index = transfer.plan.peers.index(cut_peer)

        async def serving(ctx: CallContext, request: Any, stream: Stream) -> Any:
            if request.sender == index:

                async def gone(data: Any) -> None:
                    raise NetError("the reducer went away while sending")

                stream.send_data = gone  # type: ignore[method-assign]
            return await serve(ctx, request, stream)

        transfer.serve = serving  # type: ignore[method-assign]

    reducer.optimizer.links.averager.round_hook = refuse_one
    for seed, peer in enumerate(peers):
        await peer.train(2, seed=seed)
    await settle(peers)  # the one round must hold all three, however long the training took
    await end_rounds(peers)
    reducer.optimizer.links.averager.round_hook = None
    assert [p.optimizer.epoch for p in peers] == [1, 1, 1]
    assert reducer.anchor() == other.anchor() != cut_off.anchor()
    assert cut_off.optimizer.diloco.missing, "the injected failure did not happen"
    assert np.any(flat(cut_off.optimizer.diloco.residual))  # its own values there, for now
    # between round ends it reads that most peers hold another mean, and takes it
    for _ in range(200):
        if cut_off.optimizer.repairs:
            break
        await asyncio.sleep(0.1)
    assert cut_off.optimizer.repairs == 1
    assert cut_off.anchor() == reducer.anchor()
    # nothing of its data waits to go out a second time
    assert not np.any(flat(cut_off.optimizer.diloco.residual))


async def test_the_residual_is_kept_after_a_landing_and_voided_when_it_goes_out(
    make_dpeer: MakeDPeer, tmp_path: Path
) -> None:
    """A crash writes nothing: the residual is written after a landing, and a restart from that
    file sends it; once the next round's end sends it itself, the file is gone (never twice)."""
    kept = tmp_path / "unsent.npz"
    codec = top_k(0.05, 2)
    first = await make_dpeer(codec=codec, unsent_file=kept, unsent_every=0.0)
    other = await make_dpeer(codec=codec)
    await settle([first, other])
    for seed, peer in enumerate((first, other)):
        await peer.train(3, seed=seed)
    await end_rounds([first, other])
    assert first.optimizer.unsent is not None
    await first.optimizer.unsent.settle()
    assert kept.is_file()
    residual = flat(first.optimizer.diloco.residual).copy()
    assert np.any(residual)
    # a crash now, and a restart from the same work folder: the residual comes back, once
    copy = kept.with_name("copy.npz")
    copy.write_bytes(kept.read_bytes())
    again = await make_dpeer(codec=codec, unsent_file=copy)
    assert not copy.exists()
    np.testing.assert_array_equal(flat(again.optimizer.diloco.residual), residual)
    # no crash: the next round's end sends the residual, and the copy of it is void
    await first.train(1, seed=7)
    await first.optimizer.end_round()
    assert not kept.exists()
