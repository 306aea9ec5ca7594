"""The readiness estimate on tables of records: who counts towards our epoch, and how much."""

from __future__ import annotations

import math
import time

import pytest

from core.training.dedloc.readiness import Own, estimate, fresh
from core.training.progress import RECORD_TTL, PeerProgress, ProgressBoard
from tests.conftest import MakeHost
from tests.training.conftest import start_node

NOW = 1_000.0
ME = Own(peer="me", epoch=7, samples=40, speed=10.0, epoch_started=NOW - 3.0)


def record(
    peer: str, epoch: int, samples: int, speed: float, age: float, *role: str
) -> PeerProgress:
    """A record ``age`` seconds old (a trainer's unless a role is given)."""
    return PeerProgress(peer, epoch, samples, speed, NOW - age, *(role or ("trainer",)))


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        # alone: our own samples only
        ([], 40.0),
        # our own record in the table is not counted twice
        ([record("me", 7, 999, 10.0, 0.0)], 40.0),
        # a live trainer at our epoch: its samples plus its speed since it reported
        ([record("a", 7, 30, 5.0, 2.0)], 40 + 30 + 5 * 2),
        # a client counts like a trainer
        ([record("a", 7, 30, 5.0, 2.0, "client")], 40 + 30 + 5 * 2),
        # one at the epoch before ours stepped with us: its speed since our epoch began
        ([record("a", 6, 200, 5.0, 1.0)], 40 + 5 * 3),
        # a late joiner two epochs behind will download the state first: nothing
        ([record("a", 5, 200, 5.0, 1.0)], 40.0),
        # ahead of us: its samples are towards another epoch
        ([record("a", 8, 200, 5.0, 1.0)], 40.0),
        # paused, auxiliary, departed: nothing
        ([record("a", 7, 30, 5.0, 1.0, "paused")], 40.0),
        ([record("a", 7, 30, 0.0, 1.0, "backbone")], 40.0),
        ([record("a", 7, 30, 5.0, 1.0, "left")], 40.0),
        # stale: not refreshed within the TTL (killed, link lost), however many samples it had
        ([record("a", 7, 500, 50.0, RECORD_TTL + 0.5)], 40.0),
        # unknown speed of a live trainer: assume ours
        ([record("a", 7, 30, 0.0, 2.0)], 40 + 30 + 10 * 2),
        # a mixed table: only the live trainers at our epoch (and the one just behind) count
        (
            [
                record("a", 7, 30, 5.0, 2.0),
                record("b", 6, 100, 4.0, 0.5),
                record("c", 7, 80, 8.0, RECORD_TTL + 5),
                record("d", 7, 60, 8.0, 1.0, "paused"),
                record("e", 3, 60, 8.0, 1.0),
                record("f", 7, 0, 0.0, 0.1, "backbone"),
            ],
            40 + (30 + 5 * 2) + 4 * 3,
        ),
    ],
)
def test_estimate_counts_only_live_work_towards_our_epoch(
    records: list[PeerProgress], expected: float
) -> None:
    assert estimate(records, ME, NOW) == pytest.approx(expected)


def test_nobody_knows_a_speed_yet_means_watch_every_step() -> None:
    me = Own("me", 7, 0, 0.0, NOW)
    assert estimate([record("a", 7, 30, 0.0, 1.0)], me, NOW) == math.inf
    # a late joiner with no speed does not force it
    assert estimate([record("a", 2, 30, 0.0, 1.0)], me, NOW) == 0.0


def test_the_estimate_is_a_function_of_the_time() -> None:
    table = [record("a", 7, 30, 5.0, 2.0)]
    later = estimate(table, ME, NOW + 4.0)
    assert later == pytest.approx(40 + 30 + 5 * 6)
    # once the record is older than the TTL it stops counting at all
    assert estimate(table, ME, NOW + RECORD_TTL) == 40.0


def test_fresh_is_the_ttl() -> None:
    assert fresh(record("a", 7, 0, 0.0, RECORD_TTL), NOW)
    assert not fresh(record("a", 7, 0, 0.0, RECORD_TTL + 0.01), NOW)


async def test_records_of_peers_we_banned_count_for_nothing(make_host: MakeHost) -> None:
    """A member this peer caught lying: its samples would never reach our rounds and its epoch
    must not make us wait for a state we refuse to load from it."""
    host_a, dht_a = await start_node(make_host, None)
    host_b, dht_b = await start_node(make_host, str(host_a.addresses[0]))
    banned: set[str] = set()
    try:
        mine = ProgressBoard(dht_a, "collab", ignored=lambda: frozenset(banned))
        theirs = ProgressBoard(dht_b, "collab")
        now = time.time()
        own = PeerProgress(str(host_a.peer_id), 7, 40, 10.0, now)
        assert await mine.publish(own)
        assert await theirs.publish(PeerProgress(str(host_b.peer_id), 9, 500, 10.0, now))
        assert {r.peer for r in await mine.fetch()} == {str(host_a.peer_id), str(host_b.peer_id)}
        assert mine.view(await mine.fetch(), own, 100).epoch == 9
        banned.add(str(host_b.peer_id))
        records = await mine.fetch()
        assert [r.peer for r in records] == [str(host_a.peer_id)]
        view = mine.view(records, own, 100)
        assert (view.epoch, view.samples, len(view.peers)) == (7, 40, 1)
        assert estimate(records, Own(str(host_a.peer_id), 7, 40, 10.0, now), now) == 40
    finally:
        await dht_b.close()
        await dht_a.close()
