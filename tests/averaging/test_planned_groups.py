"""Groups a caller planned: ranked searchers gather at their rank 0 whoever comes first, ahead of
unranked ones, and a leader that came last still closes before the followers that share its
deadline give up."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from core.averaging import Averager
from core.averaging.matchmaking import MatchmakingError, _parse_declaration
from core.dht import owner_marker
from core.net import Identity
from tests.averaging.conftest import PATIENT, MakeAveragers


def test_a_declaration_with_a_rank_is_ordered_by_it_ahead_of_any_without() -> None:
    peer = Identity.generate().peer_id
    subkey = owner_marker(peer)
    ranked = _parse_declaration(subkey, [99.0, False, [], 3])
    unranked = _parse_declaration(subkey, [1.0, False, []])
    assert ranked is not None
    assert unranked is not None
    assert ranked.order == (0, 3.0, peer.to_bytes())
    assert unranked.order == (1, 1.0, peer.to_bytes())
    assert ranked.order < unranked.order  # however late its deadline
    for bad in (True, -1, 1 << 16, 2.0, "0", None):
        assert _parse_declaration(subkey, [1.0, False, [], bad]) is None, bad
    assert _parse_declaration(subkey, [1.0, False, [], 0, 0]) is None


async def test_a_planned_group_gathers_at_its_first_rank_though_it_comes_last(
    make_averagers: MakeAveragers,
) -> None:
    # patient enough that ranks 1 and 2 would wait for a third member of their own
    averagers = await make_averagers(3, replace(PATIENT, min_matchmaking_time=10.0))

    async def look(averager: Averager, rank: int, after: float) -> list[str]:
        await asyncio.sleep(after)
        group = await averager.matchmaker.form_group("planned", 15.0, 3, rank=rank)
        return [str(m.peer) for m in group.members]

    # ranks 1 and 2 come first and meet; rank 0 comes a second later and takes them over
    groups = await asyncio.gather(
        look(averagers[0], 0, 1.0), look(averagers[1], 1, 0.0), look(averagers[2], 2, 0.0)
    )
    assert groups[0] == groups[1] == groups[2]
    assert groups[0][0] == str(averagers[0].host.peer_id)
    assert sorted(groups[0]) == sorted(str(a.host.peer_id) for a in averagers)


async def test_a_leader_that_came_last_closes_before_its_followers_give_up(
    make_averagers: MakeAveragers,
) -> None:
    # patience beyond every timeout: the leader waits for a third member that never comes, until
    # the deadline it shares with its follower (a round's matchmaking window)
    config = replace(PATIENT, min_matchmaking_time=30.0, max_matchmaking_time=30.0)
    leader, follower = await make_averagers(2, config)
    loop = asyncio.get_running_loop()
    window_ends = loop.time() + 5.0

    async def look(averager: Averager, rank: int, after: float) -> list[str]:
        await asyncio.sleep(after)
        timeout = window_ends - loop.time()
        group = await averager.matchmaker.form_group("window", timeout, 3, rank=rank)
        return [str(m.peer) for m in group.members]

    joined, led = await asyncio.gather(look(follower, 1, 0.0), look(leader, 0, 1.5))
    assert joined == led == [str(leader.host.peer_id), str(follower.host.peer_id)]


async def test_a_rank_out_of_range_is_refused(make_averagers: MakeAveragers) -> None:
    (averager,) = await make_averagers(1, PATIENT)
    with pytest.raises(ValueError, match="rank"):
        await averager.matchmaker.form_group("bad", 1.0, 2, rank=-1)
    with pytest.raises(MatchmakingError):  # a sane rank alone: no group, and a clear error
        await averager.matchmaker.form_group("alone", 0.5, 2, rank=0)
