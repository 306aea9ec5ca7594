"""Helpers: which trainers the backbone may hand a round to replay, as it sees them."""

from __future__ import annotations

from core.training.credit.checks.standing import Standings
from core.training.diloco.checks import helpers as helpers_module
from core.training.diloco.checks.helpers import Helpers


def made(*trusted: str, members: tuple[str, ...] = ("a", "b", "c", "d")) -> Helpers:
    standings = Standings(0.1)
    for peer in trusted:
        standings.passed(peer, 0)
    helpers = Helpers(standings, rounds=4)
    helpers.met(0, members)
    return helpers


def test_a_helper_is_a_trusted_member_of_the_newest_round() -> None:
    helpers = made("a", "b")
    assert helpers.known() == ["a", "b"]  # c and d are newcomers
    helpers.standings.failed("b")
    assert helpers.known() == ["a"]  # caught: never again
    helpers.met(1, ["b", "c"])
    assert helpers.known() == []  # a left the newest round
    assert Helpers(Standings(0.1), rounds=4).known() == []  # no round landed yet


def test_an_idle_helper_is_not_the_member_nor_busy_nor_resting() -> None:
    helpers = made("a", "b", "c")
    assert helpers.idle("a") == ["b", "c"]
    helpers.asked("b")
    assert helpers.idle() == ["a", "c"]
    helpers.answered("b", 1.0, replayed=True)
    assert helpers.idle() == ["a", "b", "c"]
    assert helpers.helped == 1
    helpers.rest("c")
    assert helpers.idle() == ["a", "b"]
    assert helpers.known() == ["a", "b", "c"]  # resting, still one of them
    helpers.unable("a")
    assert helpers.known() == ["b", "c"]


def test_a_helper_past_its_share_of_replays_waits() -> None:
    """Its share is counted from the wall time of its calls: past 5 % (the bucket's burst spent),
    it is not asked until the share has filled again."""
    helpers = made("a", "b")
    burst = helpers_module.SHARE * 600.0  # what the bucket holds (``budget.BURST``)
    helpers.asked("a")
    helpers.answered("a", burst + 30.0, replayed=True)
    assert helpers.idle() == ["b"]
    assert helpers.known() == ["a", "b"]
