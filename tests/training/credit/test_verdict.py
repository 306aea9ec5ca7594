"""Verdicts, shared by both modes' checkers: which members a landed round draws, and what each
outcome of a check's body becomes (verdict, standing, record, evidence)."""

from __future__ import annotations

import asyncio
import random
from typing import Any, cast

import pytest

from core.net.errors import DialError, NetError, UnavailableError, UnknownMethodError
from core.training.credit.checks.standing import Standings
from core.training.credit.checks.verdict import Apart, Caught, Tally, Unclaimed, Verdicts
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
    assert found.draw([PEER, OTHER]) == [PEER, OTHER]
    release = asyncio.Event()

    async def slow(tally: Tally) -> None:
        await release.wait()

    running = asyncio.create_task(found.run(PEER, 0, slow))
    await asyncio.sleep(0)
    assert found.checking(PEER)
    # the next round lands while the replay of PEER's first round is under way: drawing it again
    # would queue a second replay that vouches for nothing more
    assert found.draw([PEER, OTHER]) == [OTHER]
    release.set()
    assert (await running).verdict == "passed"
    assert found.draw([PEER, OTHER]) == [OTHER]  # trusted now: at the rate
    release.clear()
    stuck = asyncio.create_task(found.run(OTHER, 1, slow))
    await asyncio.sleep(0)
    stuck.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stuck
    assert not found.checking(OTHER)  # a cancelled check is not under way any more
    assert found.draw([OTHER]) == [OTHER]


async def test_random_checks_stop_at_the_budget_but_a_newcomers_does_not() -> None:
    found, _ = verdicts(rate=0.999999)
    found.budget = 0.0
    await found.run(PEER, 0, nothing)  # trusted now, and the checks took their time
    assert found.draw([PEER, OTHER]) == [OTHER]
    found.standings.rate = 1.0  # a project that asks for every check gets every check
    assert found.draw([PEER, OTHER]) == [PEER, OTHER]


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
