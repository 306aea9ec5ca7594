"""Verdicts, shared by both modes' checkers: which members a landed round draws, and what each
outcome of a check's body becomes (verdict, standing, record, evidence)."""

from __future__ import annotations

import asyncio
import random
from typing import Any, cast

import pytest

from core.net.errors import DialError, NetError, UnavailableError, UnknownMethodError
from core.training.credit.checks.budget import BURST
from core.training.credit.checks.standing import Standings
from core.training.credit.checks.verdict import (
    BUDGET,
    NEWCOMER_BUDGET,
    Apart,
    Caught,
    Tally,
    Unclaimed,
    Verdicts,
)
from core.training.moderation.evidence import EvidenceBoard
from core.trust.identity import Identity

PEER = str(Identity.generate().peer_id)
OTHER = str(Identity.generate().peer_id)


class Board:
    """What the checks ask of an evidence board: accusations kept, none published anywhere."""

    def __init__(self) -> None:
        self.accused: list[tuple[str, str, str]] = []
        self.published = 0

    def accuse(self, accused: Any, *, round_key: str, statistic: str, **_: Any) -> object:
        self.accused.append((str(accused), round_key, statistic))
        return object()

    async def publish_signed(self, evidence: list[object], context: str) -> None:
        self.published += len(evidence)


def verdicts(rate: float = 0.1) -> tuple[Verdicts, Board]:
    board = Board()
    found = Verdicts("round", Standings(rate), cast(EvidenceBoard, board), rng=random.Random(0))
    return found, board


def remote(error: type[NetError]) -> NetError:
    exc = error("no")
    exc.remote = True  # type: ignore[attr-defined]
    return exc


async def nothing(tally: Tally) -> None:
    tally.compute = 0.5


@pytest.mark.parametrize(
    ("raised", "verdict", "statistic", "trusted", "caught"),
    [
        (None, "passed", None, True, False),
        (Caught("round_replay", 0.3, "far from its replay"), "caught", "round_replay", False, True),
        (Apart("another anchor"), "apart", None, False, False),
        (DialError("no route"), "unreached", None, False, False),
        (TimeoutError(), "unreached", None, False, False),
        (UnavailableError("leaving"), "unreached", None, False, False),
        (Unclaimed("keeps nothing of it, claims nothing"), "unreached", None, False, False),
        ("refusal", "caught", "work_refused", False, True),
    ],
)
async def test_what_a_check_found_becomes_its_verdict(
    raised: BaseException | str | None,
    verdict: str,
    statistic: str | None,
    trusted: bool,
    caught: bool,
) -> None:
    found, board = verdicts()

    async def body(tally: Tally) -> None:
        tally.claimed, tally.backed, tally.compute = 64, 64, 1.5
        if raised == "refusal":
            raise remote(UnknownMethodError)
        if isinstance(raised, BaseException):
            raise raised

    record = await found.run(PEER, 7, body)
    standing = found.standings.of(PEER)
    assert (record.verdict, record.epoch, record.claimed, record.compute) == (verdict, 7, 64, 1.5)
    assert found.records == [record]
    assert (standing.vouched == 7, standing.caught) == (trusted, caught)
    assert standing.unjudged == (verdict in ("apart", "unreached"))
    # a check that could not reach the member is made again; one with nothing to judge is not
    opened = verdict == "unreached" and not isinstance(raised, Unclaimed)
    assert standing.open == ({7} if opened else set())
    assert board.accused == ([(PEER, "round.7", statistic)] if statistic else [])
    assert board.published == (1 if statistic else 0)
    assert found.compute_seconds == 1.5
    assert not found.checking(PEER)


async def test_a_newcomer_is_drawn_whatever_the_draw_but_not_again_while_its_check_runs() -> None:
    found, _ = verdicts(rate=1e-9)  # a trusted member is as good as never drawn
    assert found.draw([PEER]) == [PEER]
    release = asyncio.Event()

    async def slow(tally: Tally) -> None:
        await release.wait()

    running = asyncio.create_task(found.run(PEER, 0, slow))
    await asyncio.sleep(0)
    assert found.checking(PEER)
    # the next round lands while the replay of PEER's first round is under way: drawing it again
    # would queue a second replay that vouches for nothing more
    assert found.draw([PEER]) == []
    release.set()
    assert (await running).verdict == "passed"
    assert found.draw([PEER, OTHER]) == [OTHER]  # PEER trusted now: at the rate
    release.clear()
    stuck = asyncio.create_task(found.run(OTHER, 1, slow))
    await asyncio.sleep(0)
    stuck.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stuck
    assert not found.checking(OTHER)  # a cancelled check is not under way any more
    assert found.draw([OTHER]) == [OTHER]


async def test_random_checks_stop_at_the_budget_but_a_newcomers_does_not() -> None:
    found = Verdicts("round", Standings(0.999999), cast(EvidenceBoard, Board()),
                     rng=random.Random(0), budget=0.0)  # fmt: skip
    await found.run(PEER, 0, nothing)  # trusted now, and the checks took their time
    assert found.draw([PEER, OTHER]) == [OTHER]
    found.standings.rate = 1.0  # a project that asks for every check gets every check
    assert found.draw([PEER, OTHER]) == [OTHER, PEER]  # newcomers first


class Clock:
    """A ``core.util.clock.Clock`` that the flood sets to a time, not only moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


async def flood(found: Verdicts, clock: Clock, honest: list[str], landings: int) -> dict[str, int]:
    """A landing every 15 s, each bringing five fresh identities beside the honest members; each
    drawn check recomputes for 10 s of the checker's time, one after the other (``Verdicts``
    keeps no clock of its own). Returns the landing at which each honest member was first
    checked."""
    first: dict[str, int] = {}

    async def replay(tally: Tally) -> None:
        tally.compute = 10.0
        clock.now += 10.0

    for landing in range(landings):
        landed_at = clock.now
        fresh = [f"sybil-{landing}-{k}" for k in range(5)]
        for peer in found.draw([*honest, *fresh]):
            first.setdefault(peer, landing)
            await found.run(peer, landing, replay)
        clock.now = max(clock.now, landed_at + 15.0)
    return {peer: first[peer] for peer in honest if peer in first}


@pytest.mark.parametrize("quiet_hours", [0, 24])
async def test_fresh_identities_take_at_most_the_newcomers_share_of_the_checker(
    quiet_hours: int,
) -> None:
    """A stream of fresh identities, each a newcomer whose first check the backbone pays for:
    they take half its time at most (and the burst a quiet spell saved, whether a day or none),
    and the honest newcomers, first seen, are checked first."""
    clock = Clock()
    found = Verdicts("round", Standings(0.1), cast(EvidenceBoard, Board()),
                     rng=random.Random(0), clock=clock)  # fmt: skip
    honest = ["honest-a", "honest-b", "honest-c"]
    for peer in honest:
        found.standings.of(peer)  # heard of before the flood
    clock.now = quiet_hours * 3600.0  # a day with nothing checked, or none
    first = await flood(found, clock, honest, landings=240)  # an hour of landings
    hour = clock.now - quiet_hours * 3600.0
    # the newcomers' checks half the time (and what a quiet spell saved), the random checks of
    # the trusted 5 % beside them
    shares = NEWCOMER_BUDGET + BUDGET
    assert found.compute_seconds <= shares * (hour + BURST) + 20.0
    newcomers = 10.0 * sum(1 for r in found.records if r.peer.startswith("sybil"))
    assert newcomers >= NEWCOMER_BUDGET * hour - 20.0  # and no less: nothing starves them
    assert [r.peer for r in found.records[:3]] == honest
    assert first["honest-a"] == 0  # one at a time until a check's cost is known
    assert max(first.values()) <= 1
    # the other newcomers wait, their claims held
    assert len(found.records) < 5 * 240 / 4
    unbounded = Verdicts("round", Standings(0.1), cast(EvidenceBoard, Board()),
                         rng=random.Random(0), clock=clock, newcomer_budget=float("inf"))  # fmt: skip
    began = clock.now
    await flood(unbounded, clock, honest, landings=20)
    assert unbounded.compute_seconds / (clock.now - began) > 0.9


async def test_a_flood_of_newcomers_leaves_the_random_checks_their_budget() -> None:
    clock = Clock()
    found = Verdicts("round", Standings(0.999999), cast(EvidenceBoard, Board()),
                     rng=random.Random(0), clock=clock)  # fmt: skip
    await flood(found, clock, [PEER], landings=240)  # PEER trusted after its first landing
    trusted = [r for r in found.records if r.peer == PEER][1:]
    share = 10.0 * len(trusted) / clock.now
    assert BUDGET / 2 <= share <= BUDGET + (BUDGET * BURST + 10.0) / clock.now  # + one check


async def test_a_check_that_could_not_reach_its_member_is_made_again_then_expires() -> None:
    """``again`` at each landing: the open check of epoch 3 is made again while the checker can
    still make it; when it no longer can, it expires and what trust paid is withdrawn."""
    found, _ = verdicts()
    await found.run(PEER, 1, nothing)  # trusted from epoch 1

    async def unreachable(tally: Tally) -> None:
        raise TimeoutError

    await found.run(PEER, 3, unreachable)
    await found.run(OTHER, 3, unreachable)
    kept = {3, 4, 5}
    assert found.again(kept.__contains__, 4) == [(PEER, 3), (OTHER, 3)]
    assert (await found.run(OTHER, 3, nothing)).verdict == "passed"  # answered this time
    await found.run(PEER, 3, unreachable)  # not this time
    release = asyncio.Event()

    async def slow(tally: Tally) -> None:
        await release.wait()

    running = asyncio.create_task(found.run(PEER, 5, slow))
    await asyncio.sleep(0)
    kept = {4, 5, 6}
    # not while another check of it is under way: it may answer that one
    assert found.again(kept.__contains__, 6) == []
    release.set()
    await running
    assert found.standings.of(PEER).open == {3}
    assert found.again(kept.__contains__, 6) == []  # epoch 3 can no longer be checked
    standing = found.standings.of(PEER)
    assert (standing.open, standing.vouched, standing.voided) == (set(), -1, [(5, 6)])
    assert found.standings.withdrawals() == {PEER: 5}
    assert found.standings.of(OTHER).open == set()
    assert found.again(kept.__contains__, 7) == []


async def test_a_newcomer_over_the_newcomers_share_waits_and_the_log_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its credit waits for a later landing, which a newcomer that leaves may never see: the
    backbone's log names it (the churn soak reads that line to tell the rule from a loss)."""
    found = Verdicts("work", Standings(0.1), cast(EvidenceBoard, Board()),
                     rng=random.Random(0), newcomer_budget=0.0)  # fmt: skip
    await found.run(PEER, 0, nothing)  # a check's cost is known, and the newcomers' share spent
    with caplog.at_level("INFO", logger="core.training.credit.checks.verdict"):
        assert found.draw([OTHER]) == []
    assert f"newcomer {OTHER[:12]} waits" in caplog.text
