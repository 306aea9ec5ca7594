"""Verified reducers: on real loopback rounds a lying reducer is caught, named and shut out, a sender
that swaps its data after committing is named instead, and honest rounds find nothing; plus the pure
pieces (commitments, seals, the choice of checks, the comparison, the ban list)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from core.averaging import (
    Averager,
    AveragerConfig,
    AveragingResult,
    MatchmakingError,
)
from core.averaging.allreduce import AllReduce
from core.averaging.bans import BanList
from core.averaging.config import VerificationConfig
from core.averaging.messages import InputRow, PartSeal, ReduceSummary
from core.averaging.robust.aggregation import AggregationConfig
from core.averaging.round import reducer as reducer_module
from core.averaging.round.checks import (
    COMMITMENT_MISMATCH,
    REDUCER_EQUIVOCATION,
    REDUCER_MISMATCH,
    VERIFICATION_REFUSED,
    Check,
    choose_checks,
    possible_checks,
)
from core.averaging.round.transfer import Transfer
from core.averaging.verified import verified_round
from core.averaging.verified.commitments import (
    ReducerLedger,
    SenderLedger,
    malformed_seal,
    row_signed,
    seal_digest,
    seal_signed,
    values_digest,
)
from core.averaging.verified.verifier import PartCheck, mismatch
from core.codecs import NONE, UINT8
from core.codecs.chunks import decode, encode
from core.codecs.topk import top_k
from core.dht import owner_marker
from core.net.errors import InvalidRequestError
from core.trust.identity import Identity
from core.trust.peer_id import PeerID
from core.util.clock import FakeClock
from core.util.errors import ConfigError
from tests.averaging.conftest import PATIENT, QUICK, MakeAveragers
from tests.support.leaks import HANG_GUARD, poll_until

EVERYTHING = VerificationConfig(enabled=True, parts=1000.0, chunks=0, timeout=5.0)
"""Every member checks every chunk of every part it received: no luck involved in the tests."""
SHAPES = ((4096 * 6 + 33,), (70,))
"""With 4096-value chunks, parts of four members span two chunks and a tensor boundary."""


def verifying(base: AveragerConfig = PATIENT, **changes: Any) -> AveragerConfig:
    return replace(base, verification=EVERYTHING, **changes)


def tensors_for(count: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(7)
    return [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(count)]


async def one_round(
    averagers: Sequence[Averager], key: str, tensors: list[list[np.ndarray]]
) -> list[AveragingResult]:
    pending = await asyncio.gather(*(a.prepare(key, timeout=HANG_GUARD) for a in averagers))
    return list(await asyncio.gather(*(p.run(t) for p, t in zip(pending, tensors, strict=True))))


@pytest.fixture
def checks_run(monkeypatch: pytest.MonkeyPatch) -> list[tuple[PeerID, int]]:
    """(verifier, part) of every check made: proof that verification really ran."""
    made: list[tuple[PeerID, int]] = []
    original = verified_round.verify_part

    async def counting(check: PartCheck) -> PartCheck:
        made.append((check.group.members[check.me].peer, check.part))
        return await original(check)

    monkeypatch.setattr(verified_round, "verify_part", counting)
    return made


@pytest.fixture
def lying_reducer(monkeypatch: pytest.MonkeyPatch) -> Callable[[AggregationConfig], None]:
    """Make the reducer configured with this very ``AggregationConfig`` object shift its aggregates
    by 1 (the verifier recomputes with the real ``aggregate_chunk``: only reducers are patched)."""
    liars: list[AggregationConfig] = []
    original = reducer_module.aggregate_chunk

    def lying(inputs: Any, weights: Any, config: AggregationConfig, *rest: Any) -> Any:
        outcome = original(inputs, weights, config, *rest)
        if any(config is liar for liar in liars) and outcome.values is not None:
            outcome.values += np.float32(1.0)
        return outcome

    monkeypatch.setattr(reducer_module, "aggregate_chunk", lying)
    return liars.append


def against(result: AveragingResult, statistic: str) -> set[PeerID]:
    return {f.peer for f in result.findings if f.statistic == statistic}


# ---- real rounds ---------------------------------------------------------------------------------


async def test_an_honest_round_is_checked_and_finds_nothing(
    make_averagers: MakeAveragers, checks_run: list[tuple[PeerID, int]]
) -> None:
    averagers = await make_averagers(4, verifying(target_group_size=4))
    tensors = tensors_for(4)
    expected = [sum(t[k] for t in tensors) / 4 for k in range(len(SHAPES))]
    results = await one_round(averagers, "honest", tensors)
    for result, mine in zip(results, tensors, strict=True):
        assert result.complete, result.summary()
        assert result.findings == []
        for got, want in zip(mine, expected, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)
    assert len(checks_run) == 4 * 3  # every member checked every other part
    assert all(len(a.bans) == 0 for a in averagers)


async def test_a_lying_reducer_is_caught_named_and_kept_out_of_the_next_round(
    make_averagers: MakeAveragers,
    lying_reducer: Callable[[AggregationConfig], None],
) -> None:
    liar_config = verifying(target_group_size=4, aggregation=AggregationConfig())
    lying_reducer(liar_config.aggregation)
    configs = [verifying(target_group_size=4)] * 3 + [liar_config]
    averagers = await make_averagers(4, configs=configs)
    liar = averagers[3].host.peer_id
    tensors = tensors_for(4)
    expected = [sum(t[k] for t in tensors) / 4 for k in range(len(SHAPES))]
    results = await one_round(averagers, "lie", tensors)
    for result, mine in zip(results[:3], tensors[:3], strict=True):
        caught = [f for f in result.findings if f.statistic == REDUCER_MISMATCH]
        assert caught, result.findings
        part = result.members.index(liar)
        assert {(f.peer, f.part) for f in caught} == {(liar, part)}
        assert all(f.peer == liar for f in result.findings)
        assert "tolerance" in caught[0].reason
        # every chunk was recomputed: the lie is replaced by the true mean, nothing is missing
        for got, want in zip(mine, expected, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)
        assert result.averaged_fraction == 1.0
        assert not result.missing
        assert result.failed_reducers == [liar]
        assert any("caught lying" in e for e in result.errors), result.errors
    for honest in averagers[:3]:
        assert liar in honest.bans

    # the next round: it starts looking first, so it ranks best and would lead everyone; the
    # honest three group without it, and it finds nobody to group with
    liar_round = asyncio.ensure_future(averagers[3].prepare("next", timeout=2.0, target_size=3))
    leaders = averagers[3].matchmaker._key("next")

    async def declared() -> object:
        found = await averagers[0].dht.get(leaders, latest=True)
        return None if found is None else found.value

    # until its declaration is in the DHT, where the honest three look for a leader to follow
    await poll_until(
        declared, lambda value: isinstance(value, dict) and owner_marker(liar) in value
    )
    honest_rounds = [a.prepare("next", timeout=HANG_GUARD, target_size=3) for a in averagers[:3]]
    outcomes = await asyncio.gather(*honest_rounds, liar_round, return_exceptions=True)
    for pending in outcomes[:3]:
        assert not isinstance(pending, BaseException), pending
        assert liar not in [m.peer for m in pending.group.members]
        pending.cancel()
    assert isinstance(outcomes[3], MatchmakingError)


async def test_a_lie_in_a_chunk_nobody_recomputed_is_not_applied_either(
    make_averagers: MakeAveragers,
    lying_reducer: Callable[[AggregationConfig], None],
) -> None:
    """Checking one chunk of two: the lie found there is replaced by the recomputed mean, and the
    other chunks of the liar's part go back to each member's own input (counted as missing)."""
    one_chunk = replace(EVERYTHING, chunks=1)
    honest = replace(PATIENT, verification=one_chunk, target_group_size=4)
    liar_config = replace(honest, aggregation=AggregationConfig())
    lying_reducer(liar_config.aggregation)
    averagers = await make_averagers(4, configs=[honest] * 3 + [liar_config])
    liar = averagers[3].host.peer_id
    tensors = tensors_for(4)
    before = [[t.copy() for t in mine] for mine in tensors]
    expected = np.concatenate([sum(t[k] for t in before) / 4 for k in range(len(SHAPES))])
    results = await one_round(averagers, "lie", tensors)
    for result, mine, own in zip(results[:3], tensors[:3], before[:3], strict=True):
        assert against(result, REDUCER_MISMATCH) == {liar}
        flat, own_flat = np.concatenate(mine), np.concatenate(own)
        part = result.members.index(liar)
        first = sum(result.parts[:part])
        last = first + result.parts[part]
        kept = np.zeros(len(flat), dtype=bool)
        for start, end in result.missing:
            assert first <= start < end <= last, (result.missing, first, last)
            kept[start:end] = True
        # the chunks not recomputed, not the one that was (the liar's part spans three)
        assert 0 < kept.sum() < last - first, result.summary()
        np.testing.assert_array_equal(flat[kept], own_flat[kept])
        np.testing.assert_allclose(flat[~kept], expected[~kept], atol=1e-5)
        assert not result.complete


async def test_a_reducer_that_tells_one_member_something_else_is_caught(
    make_averagers: MakeAveragers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It signs a second seal for one member: that member finds its values are not the ones that
    seal names, and everyone who sees both seals (handed over with inputs) proves equivocation."""
    averagers = await make_averagers(4, verifying(target_group_size=4))
    liar, victim = averagers[0].host.peer_id, averagers[1].host.peer_id
    original = AllReduce.serve

    async def equivocate(self: AllReduce, ctx: Any, request: Any, stream: Any) -> ReduceSummary:
        summary = await original(self, ctx, request, stream)
        if self.plan.me.peer != liar or ctx.peer != victim or summary.seal is None:
            return summary
        other = replace(summary.seal, results=[bytes(32), *summary.seal.results[1:]])
        digest = seal_digest(self.plan.group_id, self.plan.index, other)
        other = replace(other, signature=self.host.identity.sign(digest))
        return replace(summary, seal=other)

    monkeypatch.setattr(AllReduce, "serve", equivocate)
    results = await one_round(averagers, "equivocate", tensors_for(4))
    assert against(results[1], REDUCER_MISMATCH) == {liar}
    for result in results[2:]:
        assert against(result, REDUCER_EQUIVOCATION) == {liar}, result.findings
    for result in results[1:]:
        assert all(f.peer == liar for f in result.findings)


async def test_every_member_spot_checks_what_it_received(
    make_averagers: MakeAveragers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without any checks drawn, a member still compares a chunk of every part with its seal."""
    config = replace(verifying(target_group_size=3), verification=replace(EVERYTHING, parts=0.0))
    averagers = await make_averagers(3, config)
    victim = averagers[2].host.peer_id
    original = Transfer._receive_chunk

    async def tampered(self: Transfer, stream: Any, index: int, span: Any) -> Any:
        outcome = await original(self, stream, index, span)
        if self.plan.me.peer == victim:
            self.tensors.view(span)[:] += np.float32(0.5)  # as if its reducer had sent it this
        return outcome

    monkeypatch.setattr(Transfer, "_receive_chunk", tampered)
    results = await one_round(averagers, "spot", tensors_for(3))
    others = {p for p in results[2].members if p != victim}
    assert against(results[2], REDUCER_MISMATCH) == others
    assert results[0].findings == []
    assert results[1].findings == []


async def test_a_sender_that_swaps_its_data_after_committing_is_the_liar(
    make_averagers: MakeAveragers, monkeypatch: pytest.MonkeyPatch
) -> None:
    averagers = await make_averagers(4, verifying(target_group_size=4))
    swapper = averagers[1].host.peer_id
    original = SenderLedger.sent

    def swapped(self: SenderLedger, part: int, chunk: int) -> bytes | None:
        kept = original(self, part, chunk)
        if kept is None or self._identity.peer_id != swapper or part == self._sender:
            return kept  # (its own input to its own part it keeps: that one is tested above)
        return bytes(b ^ 1 for b in kept[:64]) + kept[64:]  # other data than it signed for

    monkeypatch.setattr(SenderLedger, "sent", swapped)
    results = await one_round(averagers, "swap", tensors_for(4))
    for index, result in enumerate(results):
        assert result.complete
        if index == 1:
            continue
        assert against(result, COMMITMENT_MISMATCH) == {swapper}, result.findings
        assert all(f.peer == swapper for f in result.findings)  # the reducers it fed did no wrong
        assert swapper in averagers[index].bans


async def test_a_member_that_refuses_to_hand_over_its_inputs_is_reported(
    make_averagers: MakeAveragers, monkeypatch: pytest.MonkeyPatch
) -> None:
    averagers = await make_averagers(3, verifying(target_group_size=3))
    refuser = averagers[2].host.peer_id
    original = verified_round.RoundVerification.serve

    async def refuse(self: verified_round.RoundVerification, *args: Any) -> Any:
        if self.host.peer_id == refuser:
            raise InvalidRequestError("not today")
        return await original(self, *args)

    monkeypatch.setattr(verified_round.RoundVerification, "serve", refuse)
    results = await one_round(averagers, "refuse", tensors_for(3))
    for index in (0, 1):
        refused = [f for f in results[index].findings if f.statistic == VERIFICATION_REFUSED]
        assert refused, results[index].findings
        assert {f.peer for f in results[index].findings} == {refuser}
        assert "not today" in refused[0].reason
        assert refuser not in averagers[index].bans  # reported, not banned: it proved nothing


async def test_the_part_of_a_reducer_that_died_is_skipped(
    make_averagers: MakeAveragers, checks_run: list[tuple[PeerID, int]]
) -> None:
    # The dead member is waited for sender_timeout; the survivors' parts must not time out under a
    # loaded machine (QUICK's 0.6 s / 1.5 s left them unsealed there, so nothing was checked).
    config = verifying(
        QUICK,
        target_group_size=4,
        sender_timeout=2.0,
        reducer_timeout=8.0,
        request_timeout=5.0,
        allreduce_timeout=HANG_GUARD,
    )
    averagers = await make_averagers(4, config)
    pending = await asyncio.gather(*(a.prepare("dead", timeout=HANG_GUARD) for a in averagers))
    victim = averagers[3]
    dead = victim.host.peer_id
    await victim.close()
    await victim.dht.close()
    await victim.host.close()
    tensors = tensors_for(4)
    results = await asyncio.gather(
        *(p.run(t) for p, t in zip(pending[:3], tensors[:3], strict=True))
    )
    for result in results:
        assert not result.complete
        assert dead in result.failed_members()
        assert result.findings == []  # nothing against the survivors, no refusal from the dead
    dead_part = results[0].members.index(dead)
    assert checks_run  # the surviving parts were checked
    assert all(part != dead_part for _, part in checks_run)


async def test_lossy_codecs_clients_and_auxiliaries(
    make_averagers: MakeAveragers,
    lying_reducer: Callable[[AggregationConfig], None],
    checks_run: list[tuple[PeerID, int]],
) -> None:
    """8-bit results are recomputed on decoded inputs; a client checks (and reduces nothing), an
    backbone reduces and is checked (it takes no results, so it checks nothing)."""
    base = verifying(target_group_size=4, codec=UINT8)
    liar_config = replace(base, aggregation=AggregationConfig())
    lying_reducer(liar_config.aggregation)
    configs = [base, liar_config, replace(base, client_mode=True), replace(base, reduce_only=True)]
    averagers = await make_averagers(4, configs=configs)
    liar, client, helper = (a.host.peer_id for a in averagers[1:])
    results = await one_round(averagers, "codecs", tensors_for(4))
    for result in (results[0], results[2]):
        assert against(result, REDUCER_MISMATCH) == {liar}, result.findings
        assert all(f.peer == liar for f in result.findings)
    assert results[3].findings == []
    verifiers = {peer for peer, _ in checks_run}
    assert client in verifiers
    assert helper not in verifiers
    assert any(part == results[0].members.index(helper) for _, part in checks_run)


# ---- the pieces ----------------------------------------------------------------------------------


def _ledgers() -> tuple[Identity, Identity, SenderLedger, ReducerLedger]:
    sender, reducer = Identity.generate(), Identity.generate()
    members = [reducer.peer_id, sender.peer_id]
    return (
        sender,
        reducer,
        SenderLedger(sender, b"g", 1, 2.0),
        ReducerLedger(reducer, b"g", 0, members),
    )


def test_a_reducer_takes_only_what_the_sender_signed() -> None:
    _, reducer, sent, ledger = _ledgers()
    first = sent.commit(0, 0, b"chunk zero")
    assert ledger.accept(1, 2.0, first, b"chunk zero") is None
    second = sent.commit(0, 1, b"chunk one")
    assert "does not match" in (ledger.accept(1, 2.0, second, b"chunk 1ne") or "")
    assert "signature" in (ledger.accept(1, 3.0, second, b"chunk one") or "")  # another weight
    assert "chunk 0" in (ledger.accept(1, 2.0, first, b"chunk zero") or "")  # replayed
    assert ledger.accept(1, 2.0, second, b"chunk one") is None
    ledger.own(0, 1.0, values_digest(np.zeros(3, np.float32)))
    ledger.result(0, np.ones(3, np.float32))
    seal = ledger.seal([frozenset({0, 1}), frozenset()])
    assert seal_signed(reducer.peer_id, b"g", 0, seal)
    assert not seal_signed(reducer.peer_id, b"other group", 0, seal)
    row = next(r for r in seal.rows if r.sender == 1)
    assert row_signed(sent._identity.peer_id, b"g", 0, row)
    assert not row_signed(sent._identity.peer_id, b"g", 0, replace(row, weight=9.0))
    assert not row_signed(reducer.peer_id, b"g", 0, row)
    assert malformed_seal(seal, 2, 2) is None
    assert malformed_seal(replace(seal, used=[[0, 1]]), 2, 2) is not None
    assert malformed_seal(replace(seal, used=[[1, 0], []]), 2, 2) is not None
    assert malformed_seal(replace(seal, rows=[*seal.rows, seal.rows[0]]), 2, 2) is not None
    bad_weight = InputRow(1, float("nan"), row.digests, row.signature)
    assert malformed_seal(PartSeal([bad_weight], [[1], []], seal.results, b""), 2, 2) is not None


def test_choosing_checks() -> None:
    rng = random.Random(1)
    counts = [3, 0, 5, 2]  # member 1 is a client: it reduces nothing
    pairs = possible_checks(counts, verifiers=[0, 1, 2])
    assert pairs == 2 + 2 + 3
    assert choose_checks(0, [2, 3], counts, pairs=pairs, config=EVERYTHING, rng=rng) == [
        Check(2, (0, 1, 2, 3, 4)),
        Check(3, (0, 1)),
    ]
    two = replace(EVERYTHING, chunks=2)
    picked = choose_checks(0, [2], counts, pairs=pairs, config=two, rng=rng)[0].chunks
    assert len(set(picked)) == 2
    assert list(picked) == sorted(picked)
    assert max(picked) < 5
    none = replace(EVERYTHING, parts=0.0)
    assert choose_checks(0, [2, 3], counts, pairs=pairs, config=none, rng=rng) == []
    # one part per round over 7 possible checks: each is drawn 1/7 of the time
    one = replace(EVERYTHING, parts=1.0)
    drawn = sum(
        len(choose_checks(0, [2, 3], counts, pairs=pairs, config=one, rng=rng)) for _ in range(7000)
    )
    assert 1700 < drawn < 2300  # 2000 expected


def test_the_comparison_allows_rounding_and_one_codec_step_but_no_more() -> None:
    rng = np.random.default_rng(3)
    values = rng.standard_normal(4096).astype(np.float32)
    assert mismatch(values, values.copy(), NONE, 1e-5) == 0.0
    rounded = np.nextafter(values, np.float32(np.inf)).astype(np.float32)
    assert mismatch(rounded, values, NONE, 1e-5) < 1.0
    assert mismatch(values + np.float32(0.01), values, NONE, 1e-5) > 1.0
    step = (float(values.max()) - float(values.min())) / 255
    assert mismatch(values + np.float32(step * 0.9), values, UINT8, 1e-5) < 1.0
    assert mismatch(values + np.float32(step * 3), values, UINT8, 1e-5) > 1.0
    broken = values.copy()
    broken[5] = np.nan
    assert mismatch(broken, values, NONE, 1e-5) == float("inf")


def test_a_sparse_mean_may_break_a_tie_otherwise_and_nothing_more() -> None:
    codec = top_k(0.01, 8).for_sum(4)
    rng = np.random.default_rng(5)
    dense = rng.standard_normal(8192).astype(np.float32)
    expected = decode(codec, encode(codec, dense), dense.size)
    kept = np.flatnonzero(expected)
    assert 0 < kept.size < dense.size
    assert mismatch(expected.copy(), expected, codec, 1e-5) == 0.0
    # another machine rounds the sums otherwise: the smallest kept value of a block and the
    # largest dropped one, nearly equal, trade places
    first_block = kept[kept < 4096]
    edge = first_block[np.argmin(np.abs(expected[first_block]))]
    dropped = np.setdiff1d(np.arange(4096), first_block)
    rival = dropped[np.argmax(np.abs(dense[dropped]))]
    traded = expected.copy()
    traded[rival], traded[edge] = expected[edge], 0.0
    assert mismatch(traded, expected, codec, 1e-5) <= 1.0
    # but a kept value moved, zeroed or added anywhere larger than the edge is a lie
    moved = expected.copy()
    moved[kept[-1]] *= -1
    assert mismatch(moved, expected, codec, 1e-5) > 1.0
    zeroed = expected.copy()
    largest = first_block[np.argmax(np.abs(expected[first_block]))]
    zeroed[largest] = 0.0
    assert mismatch(zeroed, expected, codec, 1e-5) > 1.0
    added = expected.copy()
    added[rival] = 10 * np.abs(expected[first_block]).max()
    assert mismatch(added, expected, codec, 1e-5) > 1.0


async def test_a_sparse_round_is_verified_and_a_lying_reducer_caught(
    make_averagers: MakeAveragers,
    lying_reducer: Callable[[AggregationConfig], None],
    checks_run: list[tuple[PeerID, int]],
) -> None:
    """``topk``: the senders commit to their sparse chunks, the reducer's own input is taken (and
    committed) as sparse as theirs, and the mean is recomputed in the denser codec it goes back in:
    an honest round finds nothing, a reducer shifting its means is named by every other member."""
    base = verifying(target_group_size=4, codec=top_k(0.01, 2))
    honest = await make_averagers(4, base)
    for result in await one_round(honest, "sparse", tensors_for(4)):
        assert result.complete, result.summary()
        assert result.findings == []
    assert len(checks_run) == 4 * 3
    liar_config = replace(base, aggregation=AggregationConfig())
    lying_reducer(liar_config.aggregation)
    averagers = await make_averagers(4, configs=[base, liar_config, base, base])
    liar = averagers[1].host.peer_id
    results = await one_round(averagers, "sparse-lie", tensors_for(4))
    for i, result in enumerate(results):
        if i != 1:
            assert against(result, REDUCER_MISMATCH) == {liar}, result.findings
            assert all(f.peer == liar for f in result.findings)


def test_bans_last_as_long_as_configured() -> None:
    clock = FakeClock(monotonic_start=100.0)
    bans = BanList(clock=clock)
    peer, other = Identity.generate().peer_id, Identity.generate().peer_id
    bans.ban(peer, 60.0, "lied")
    bans.ban(peer, 10.0, "lied again")  # a shorter ban does not shorten the longer one
    assert peer in bans
    assert other not in bans
    assert "not a peer" not in bans
    clock.advance(59.0)
    assert bans.peers() == frozenset({peer})
    clock.advance(2.0)
    assert peer not in bans
    assert len(bans) == 0


def test_settings_are_checked() -> None:
    for bad in (
        {"parts": -1.0},
        {"chunks": -2},
        {"timeout": 0.0},
        {"tolerance": 1.5},
        {"ban_seconds": float("nan")},
    ):
        with pytest.raises(ConfigError):
            VerificationConfig(**bad)
