"""DiLoCo rounds on real loopback connections: identical outer parameters after each round,
the outer step on the weighted mean of pseudo-gradients, overlap, a newcomer, a peer that leaves
mid-round, a paused peer, a missed exchange."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from core.codecs.topk import top_k
from core.training.diloco.optimizer import GATE_LEAD
from core.training.diloco.unsent import UnsentWork
from core.training.progress import PeerProgress
from tests.training.diloco.conftest import (
    DPeer,
    MakeDPeer,
    end_rounds,
    end_rounds_together,
    fresh_model,
    settle,
)

# the two sides' matchmaking must each meet within it on a loaded machine (2 s did not)
APART_MATCHMAKING = 6.0


async def test_after_each_round_every_peer_holds_identical_parameters(
    make_dpeer: MakeDPeer,
) -> None:
    peers = [await make_dpeer() for _ in range(3)]
    await settle(peers)
    start = [a.copy() for a in peers[0].optimizer.diloco.anchor]
    steps = [3, 5, 8]  # samples 12, 20, 32: the mean is weighted by them
    thetas = []
    for round_ in range(2):
        for i, peer in enumerate(peers):
            await peer.train(steps[i], seed=10 * round_ + i)
        thetas.append([[p.detach().numpy().reshape(-1).copy() for p in peer.model.parameters()]
                       for peer in peers])  # fmt: skip
        await end_rounds(peers)
        assert [p.optimizer.epoch for p in peers] == [round_ + 1] * 3
        assert len({p.anchor() for p in peers}) == 1
        assert len({p.parameters() for p in peers}) == 1  # no overlap: theta is the anchor
        assert peers[0].parameters() == peers[0].anchor()
        reports = [p.optimizer.reports[-1] for p in peers]
        assert len({r.anchor for r in reports}) == 1
        assert len(reports[0].anchor) == 64  # SHA-256 of the outer state, in hexadecimal
        assert all(r.bytes_sent > 0 for r in reports)
    assert peers[0].optimizer.reports[0].anchor != peers[0].optimizer.reports[1].anchor
    # the first round's outer step, computed here from the peers' parameters before it
    weights = np.array([4.0 * s for s in steps])
    expected = []
    for k, s in enumerate(start):
        deltas = [s - thetas[0][i][k] for i in range(3)]
        mean = sum(w * d for w, d in zip(weights, deltas, strict=True)) / weights.sum()
        expected.append(s - 0.7 * (mean + 0.9 * mean))
    reports = peers[0].optimizer.reports
    assert [r.epoch for r in reports] == [0, 1]
    assert reports[0].round_samples == pytest.approx(weights.sum())
    assert reports[0].group_size == 3


async def test_sparse_rounds_keep_peers_identical_and_feed_back_what_was_left(
    make_dpeer: MakeDPeer,
) -> None:
    codec = top_k(0.05, 2)
    peers = [await make_dpeer(codec=codec) for _ in range(2)]
    await settle(peers)
    for i, peer in enumerate(peers):
        await peer.train(4, seed=i)
    await end_rounds(peers)
    assert [p.optimizer.epoch for p in peers] == [1, 1]
    assert peers[0].anchor() == peers[1].anchor()
    assert peers[0].parameters() == peers[1].parameters()
    residual = peers[0].optimizer.diloco.residual
    assert residual is not None
    assert any(np.count_nonzero(r) for r in residual)
    assert peers[0].optimizer.last_bytes_sent > 0


async def test_with_overlap_the_round_lands_later_and_keeps_the_work_done_meanwhile(
    make_dpeer: MakeDPeer,
) -> None:
    peers = [await make_dpeer(overlap=True) for _ in range(2)]
    await settle(peers)
    for i, peer in enumerate(peers):
        await peer.train(3, seed=i)
    await asyncio.gather(*(p.optimizer.end_round() for p in peers))  # returns at once
    for i, peer in enumerate(peers):
        await peer.train(2, seed=5 + i)  # while the exchange runs (or after it landed)
    await asyncio.gather(*(p.optimizer._exchange for p in peers if p.optimizer._exchange))
    assert [p.optimizer.epoch for p in peers] == [1, 1]
    assert peers[0].anchor() == peers[1].anchor()
    # the inner steps after the round's end stay: theta is not the anchor
    assert peers[0].parameters() != peers[0].anchor()


async def test_the_gate_is_held_while_a_round_is_exchanged(make_dpeer: MakeDPeer) -> None:
    """Background work beside a peer (a backbone's replays) waits at ``optimizer.gate``: held
    through each exchange, landing included, and open once it landed."""
    peers = [await make_dpeer() for _ in range(2)]
    await settle(peers)
    held: list[bool] = []
    for peer in peers:
        gate = peer.optimizer.gate
        peer.optimizer.on_landed = lambda _, gate=gate: held.append(not gate.is_open)
        await peer.train(2, seed=0)
    assert all(p.optimizer.gate.is_open for p in peers)
    await end_rounds(peers)
    assert held == [True, True]
    assert [p.optimizer.epoch for p in peers] == [1, 1]
    assert all(p.optimizer.gate.is_open for p in peers)


async def test_the_round_clock_holds_the_gate_from_just_before_each_rounds_end(
    make_dpeer: MakeDPeer,
) -> None:
    """The round loop holds the gate ``GATE_LEAD`` seconds before the round's end, so that the
    work in flight beside it ends before matchmaking opens; the gate is open again mid-round."""
    seconds = 3.0
    peer = await make_dpeer(round_seconds=seconds, matchmaking=0.5)
    samples: list[tuple[float, bool]] = []
    await asyncio.sleep(0.1)  # the round loop's first pass
    deadline = time.time() + 2.5 * seconds
    while time.time() < deadline:
        samples.append((time.time() % seconds, peer.optimizer.gate.is_open))
        await asyncio.sleep(0.02)
    lead = [
        is_open for phase, is_open in samples if seconds - GATE_LEAD + 0.1 < phase < seconds - 0.1
    ]
    assert lead, samples
    assert not any(lead), samples
    assert any(is_open for phase, is_open in samples if phase < seconds - GATE_LEAD - 0.1), samples


async def test_a_newcomer_takes_the_outer_state_and_joins_the_next_round(
    make_dpeer: MakeDPeer,
) -> None:
    peers = [await make_dpeer() for _ in range(2)]
    await settle(peers)
    for i, peer in enumerate(peers):
        await peer.train(2, seed=i)
    await end_rounds(peers)
    newcomer = await make_dpeer()  # starts at epoch 0 and finds the others at 1
    assert newcomer.optimizer.epoch == 1
    assert newcomer.anchor() == peers[0].anchor()
    momentum = [m.tobytes() for m in peers[0].optimizer.diloco.outer.buffers]
    assert [m.tobytes() for m in newcomer.optimizer.diloco.outer.buffers] == momentum
    everyone = [*peers, newcomer]
    await settle(everyone)
    for i, peer in enumerate(everyone):
        await peer.train(2, seed=20 + i)
    await end_rounds(everyone)
    assert {p.optimizer.epoch for p in everyone} == {2}
    assert len({p.anchor() for p in everyone}) == 1
    assert newcomer.optimizer.reports[-1].group_size == 3


async def test_a_peer_alone_applies_its_own_pseudo_gradient(make_dpeer: MakeDPeer) -> None:
    peer = await make_dpeer()
    before = peer.anchor()
    await peer.train(3, seed=0)
    await end_rounds([peer])
    assert peer.optimizer.epoch == 1
    assert peer.anchor() != before
    assert peer.optimizer.reports[-1].group_size == 1


async def test_the_backbone_follows_the_rounds_with_weight_zero(make_dpeer: MakeDPeer) -> None:
    trainers = [await make_dpeer() for _ in range(2)]
    backbone = await make_dpeer(role="backbone")
    everyone = [*trainers, backbone]
    await settle(everyone)
    for i, peer in enumerate(trainers):
        await peer.train(3, seed=i)
    await end_rounds(everyone)
    assert {p.optimizer.epoch for p in everyone} == {1}
    assert len({p.anchor() for p in everyone}) == 1
    with pytest.raises(Exception, match="backbone"):
        await backbone.optimizer.step(1)


async def test_a_peer_that_leaves_mid_round_costs_only_its_own_round(
    make_dpeer: MakeDPeer,
) -> None:
    peers = [await make_dpeer(matchmaking=3.0) for _ in range(3)]
    await settle(peers)
    for i, peer in enumerate(peers):
        await peer.train(2, seed=i)
    leaver, stayers = peers[2], peers[:2]
    leaver.optimizer.interrupt()
    await leaver.optimizer.close()
    await leaver.averager.close()
    await end_rounds(stayers)
    assert [p.optimizer.epoch for p in stayers] == [1, 1]
    assert stayers[0].anchor() == stayers[1].anchor()
    report = stayers[0].optimizer.reports[-1]
    assert report.group_size == 2
    assert report.round_samples == 16.0  # the two stayers' 2 steps of 4 samples each


async def test_a_paused_peer_keeps_its_work_and_rejoins_on_the_newer_anchor(
    make_dpeer: MakeDPeer,
) -> None:
    peers = [await make_dpeer(matchmaking=3.0) for _ in range(3)]
    await settle(peers)
    sleeper = peers[2]
    await sleeper.train(2, seed=9)
    await sleeper.optimizer.pause()
    await settle(peers)  # the others read its record: paused, not expected in the round
    for i, peer in enumerate(peers[:2]):
        await peer.train(2, seed=i)
    await end_rounds(peers[:2])
    assert [p.optimizer.epoch for p in peers] == [1, 1, 0]
    await sleeper.optimizer.resume()  # takes the newer anchor, its own steps kept on top
    assert sleeper.optimizer.epoch == 1
    assert sleeper.anchor() == peers[0].anchor()
    assert sleeper.parameters() != sleeper.anchor()
    await settle(peers)
    for i, peer in enumerate(peers):
        await peer.train(1, seed=30 + i)
    await end_rounds(peers)
    assert {p.optimizer.epoch for p in peers} == {2}
    assert len({p.anchor() for p in peers}) == 1
    # the steps before the pause went out with this round: 3 steps of 4 samples
    assert sleeper.optimizer.reports[-1].samples == 12
    assert sleeper.optimizer.reports[-1].group_size == 3


async def test_a_missed_exchange_carries_its_samples_into_the_next_round(
    make_dpeer: MakeDPeer,
) -> None:
    peers = [await make_dpeer(matchmaking=1.0) for _ in range(2)]
    await settle(peers)
    early, late = peers
    await early.train(3, seed=0)
    # and its reads of the records find nothing, as a lookup that times out under load does: it
    # still knows the other trains (the records it read before), so it does not land alone
    board = early.optimizer.board
    real_fetch = board.fetch

    async def nothing_found() -> list[PeerProgress]:
        return []

    board.fetch = nothing_found  # type: ignore[method-assign]
    await end_rounds([early])  # the other is still training: no group, nothing lands
    board.fetch = real_fetch  # type: ignore[method-assign]
    assert early.optimizer.epoch == 0
    assert early.optimizer.rounds_missed == 1
    assert not early.optimizer.reports
    await early.train(1, seed=1)
    await late.train(2, seed=2)
    await end_rounds_together(peers)
    assert [p.optimizer.epoch for p in peers] == [1, 1]
    assert early.anchor() == late.anchor()
    # the missed round's 12 samples and this round's 4: nothing computed was dropped
    assert early.optimizer.reports[-1].samples == 16
    assert early.optimizer.reports[-1].round_samples == 24.0


async def test_more_trainers_than_a_group_land_one_model(make_dpeer: MakeDPeer) -> None:
    # groups of two: three trainers and the backbone make two groups, whose reducers average
    # each slot across them
    peers = [await make_dpeer(group_size=2) for _ in range(3)]
    peers.append(await make_dpeer(group_size=2, role="backbone"))
    await settle(peers)
    start = peers[0].anchor()
    for seed, peer in enumerate(peers[:3]):
        await peer.train(2 + seed, seed=seed)
    thetas = [np.frombuffer(p.parameters(), dtype=np.float32) for p in peers[:3]]
    await end_rounds(peers)
    assert [p.optimizer.epoch for p in peers] == [1, 1, 1, 1]
    groups = {p.optimizer.reports[-1].group_size for p in peers}
    assert groups != {4}, "the round formed one group: this test shows nothing"
    anchors = {p.anchor() for p in peers}
    assert len(anchors) == 1
    assert start not in anchors
    assert [p.optimizer.reports[-1].samples for p in peers[:3]] == [8, 12, 16]
    # everyone's work at its weight: the outer step (lr 0.7, momentum 0.9) of the weighted mean
    before = np.frombuffer(start, dtype=np.float32)
    mean = sum(w * (before - t) for w, t in zip((8, 12, 16), thetas, strict=True)) / 36
    after = np.frombuffer(peers[0].anchor(), dtype=np.float32)
    np.testing.assert_allclose(after, before - 0.7 * 1.9 * mean, rtol=1e-4, atol=1e-6)
    for peer in peers:  # nothing of anyone waits for a later round
        assert not any(np.any(r) for r in peer.optimizer.diloco.residual or [])


async def test_trainers_nobody_can_dial_are_planned_as_clients_and_land_every_round(
    make_dpeer: MakeDPeer,
) -> None:
    # two trainers behind routers (their averagers went client, as reachability makes them) and
    # one others can dial, with the backbone, in groups of two: a plan that took the two for
    # leaders pairs them in a third of the rounds, and such a group never forms
    peers = [await make_dpeer(group_size=2) for _ in range(3)]
    peers.append(await make_dpeer(group_size=2, role="backbone"))
    homes = peers[:2]
    for peer in homes:
        peer.averager.set_client_mode(True)
    await asyncio.gather(*(p.optimizer._publish() for p in peers))
    await settle(peers)
    for _ in range(50):  # everyone has read the homes' records since they went client
        await asyncio.gather(*(p.optimizer._refresh() for p in peers))
        if all(r.role == "client" for r in _records_of(peers[2:], homes)):
            break
        await asyncio.sleep(0.1)
    assert [p.optimizer._progress().role for p in peers] == [
        "client",
        "client",
        "trainer",
        "backbone",
    ]
    assert {r.role for r in _records_of(peers[2:], homes)} == {"client"}
    names = {str(p.optimizer.part.peer): i for i, p in enumerate(peers)}
    for epoch in range(30):  # every member's plan: each group gathers at a member that can lead
        for peer in peers:
            view = peer.optimizer.view()
            view = replace(view, peers=[replace(r, epoch=epoch) for r in view.peers])  # all fresh
            groups = peer.optimizer._groups(view, epoch)
            assert sorted(names[p] for p in groups.ranks) == [2, 3]
            assert sorted(groups.of[p] for p in groups.ranks) == [0, 1]
    for round_ in range(2):
        for seed, peer in enumerate(peers[:3]):
            await peer.train(2, seed=10 * round_ + seed)
        await end_rounds(peers)
        assert [p.optimizer.epoch for p in peers] == [round_ + 1] * 4
        assert {p.optimizer.reports[-1].group_size for p in peers} == {2}
        assert len({p.anchor() for p in peers}) == 1
    assert [p.optimizer.rounds_missed for p in peers] == [0] * 4


def _records_of(readers: list[DPeer], peers: list[DPeer]) -> list[PeerProgress]:
    """What ``readers`` last read of ``peers``' progress records."""
    wanted = {p.optimizer.part.peer for p in peers}
    return [r for reader in readers for r in reader.optimizer.view().peers if r.peer in wanted]


async def test_a_round_shorter_than_one_step_is_said_naming_the_key(
    make_dpeer: MakeDPeer, caplog: pytest.LogCaptureFixture
) -> None:
    peer = await make_dpeer(round_seconds=0.2, matchmaking=0.5)
    for seed in range(3):
        await peer.train(1, seed=seed)
        await asyncio.sleep(0.3)  # a device slower than a round
    said = [r.getMessage() for r in caplog.records if "round_seconds" in r.getMessage()]
    assert len(said) == 1, said  # once, not at every step
    assert "longer than a round" in said[0]


async def test_a_restarted_trainer_sends_the_work_it_had_not_sent(
    make_dpeer: MakeDPeer, tmp_path: Path
) -> None:
    kept = tmp_path / "work" / "unsent.npz"  # a work folder nothing has made yet
    first = await make_dpeer(unsent_file=kept)
    await first.train(3, seed=0)
    theta = first.parameters()
    first.optimizer.interrupt()
    await first.optimizer.close()  # a clean stop mid-round: 12 samples' work unsent
    assert kept.is_file()
    again = await make_dpeer(unsent_file=kept)  # the same work folder, a fresh model
    assert not kept.exists()  # taken: a crash from now on does not apply it twice
    await end_rounds([again])
    report = again.optimizer.reports[-1]
    assert report.samples == 12
    # alone, outer lr 0.7, momentum 0.9: the anchor moved by 0.7 * 1.9 of the first's work
    start = fresh_model()
    moved = [
        (torch.from_numpy(a).reshape(p.shape) - p.detach()).reshape(-1)
        for a, p in zip(again.optimizer.diloco.anchor, start.parameters(), strict=True)
    ]
    first_moved = np.frombuffer(theta, dtype=np.float32) - np.concatenate(
        [p.detach().numpy().reshape(-1) for p in start.parameters()]
    )
    np.testing.assert_allclose(
        torch.cat(moved).numpy(), 0.7 * 1.9 * first_moved, rtol=1e-4, atol=1e-6
    )


async def test_unsent_work_that_does_not_fit_the_model_is_left_alone(
    make_dpeer: MakeDPeer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kept = tmp_path / "unsent.npz"
    UnsentWork([np.ones(3, dtype=np.float32)], 4, 0).save(kept)
    peer = await make_dpeer(unsent_file=kept)
    assert kept.exists()
    assert "does not fit" in caplog.text
    assert peer.optimizer.diloco.residual is None  # nothing was carried


async def test_groups_that_landed_apart_end_on_the_larger_sides_model(
    make_dpeer: MakeDPeer,
) -> None:
    peers = [await make_dpeer(matchmaking=APART_MATCHMAKING) for _ in range(4)]
    peers.append(await make_dpeer(matchmaking=APART_MATCHMAKING, role="backbone"))
    await settle(peers)
    # two of them meet under another key, as a split no column could mend: two means land
    apart = peers[:2]
    await land_apart(peers, apart)
    assert [p.optimizer.epoch for p in peers] == [1] * 5
    assert apart[0].anchor() == apart[1].anchor() != peers[2].anchor() == peers[4].anchor()
    # between round ends (these rounds never end on their own: the clock is always in a round's
    # second half) the smaller side reads that most peers hold another mean, and takes it
    await wait_for_repairs(apart)
    assert len({p.anchor() for p in peers}) == 1
    assert [p.optimizer.repairs for p in peers] == [1, 1, 0, 0, 0]


async def test_a_peer_apart_from_most_waits_for_the_rounds_second_half_to_take_theirs(
    make_dpeer: MakeDPeer,
) -> None:
    """In a round's first half the others may not have landed the last round yet: what their
    records say then is no majority to follow (the round's end still checks, as before)."""
    seconds = 3600.0
    now = [1000 * seconds + 1.0]  # a second into a round of an hour
    peers = [
        await make_dpeer(
            matchmaking=APART_MATCHMAKING, round_seconds=seconds, clock=lambda: now[0], role=role
        )
        for role in ("trainer",) * 4 + ("backbone",)
    ]
    await settle(peers)
    apart = peers[:2]  # they meet under another key: two means land
    await land_apart(peers, apart)
    assert apart[0].anchor() == apart[1].anchor() != peers[2].anchor() == peers[4].anchor()
    await asyncio.sleep(1.5)  # several reads of the records: no repair in the first half
    assert [p.optimizer.mending.majority() for p in apart] == [peers[2].optimizer.diloco.digest] * 2
    assert [p.optimizer.repairs for p in apart] == [0, 0]
    now[0] += seconds / 2  # the second half: the next read takes theirs
    await wait_for_repairs(apart)
    assert len({p.anchor() for p in peers}) == 1


async def land_apart(peers: list[DPeer], apart: list[DPeer]) -> None:
    """A round in which ``apart`` meet under another key than the rest (a split no column could
    mend): the four trainers of ``peers`` train, and two means land."""
    for peer in apart:
        averager = peer.optimizer.links.averager
        real_average = averager.average

        async def elsewhere(tensors: Any, real: Any = real_average, **kwargs: Any) -> Any:
            return await real(tensors, **{**kwargs, "round_key": kwargs["round_key"] + "-x"})

        averager.average = elsewhere  # type: ignore[method-assign]
    for seed, peer in enumerate(peers[:4]):
        await peer.train(2, seed=seed)
    await end_rounds(peers)
    # a round that formed no group is carried, not landed apart: the tests below need two means
    assert [p.optimizer.rounds_missed for p in peers] == [0] * 5, "a group did not form in time"


async def wait_for_repairs(peers: list[DPeer], timeout: float = 20.0) -> None:
    """Until each of ``peers`` has repaired once (it reads the records every 0.2 s here)."""
    for _ in range(int(timeout / 0.1)):
        if all(p.optimizer.repairs == 1 for p in peers):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"repairs: {[p.optimizer.repairs for p in peers]}")
