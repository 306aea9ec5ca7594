"""Refused expert calls as evidence: one accusation per caller per window, published in the
server's evidence record, collected by the backbone's server and handed to its reporter."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from core.net import Identity
from core.training.moderation.call_evidence import MAX_ACCUSED, STATISTIC, RefusedCalls
from core.training.moderation.evidence import EvidenceBoard
from core.trust.evidence import Evidence
from core.trust.peer_id import PeerID
from core.util.clock import FakeClock
from tests.conftest import MakeHost
from tests.support.leaks import poll_until
from tests.training.conftest import start_node

PROJECT = "experts-evidence"


@dataclass(frozen=True)
class Call:
    caller: PeerID
    uid: str
    method: str
    reason: str


def nan_call(caller: PeerID, uid: str = "ffn.0.1", method: str = "backward") -> Call:
    return Call(caller, uid, method, f"expert {uid}: the {method} call's tensors hold NaN")


async def test_each_callers_refused_calls_become_one_accusation_collected_and_reported(
    make_host: MakeHost,
) -> None:
    server_host, server_dht = await start_node(make_host, None)
    backbone_host, backbone_dht = await start_node(make_host, str(server_host.addresses[0]))
    clock = FakeClock(time.time())
    reported: list[Evidence] = []
    try:
        server = RefusedCalls(EvidenceBoard(server_dht, server_host.identity, PROJECT, clock=clock))
        backbone = RefusedCalls(
            EvidenceBoard(backbone_dht, backbone_host.identity, PROJECT),
            collect=True,
            on_evidence=reported.extend,
        )
        mallory, eve = Identity.generate().peer_id, Identity.generate().peer_id
        for _ in range(3):
            server.refused(nan_call(mallory))
        server.refused(nan_call(mallory, "ffn.1.1", "forward"))
        server.refused(nan_call(eve))
        signed = await server.flush()
        assert {(e.accused, e.value, e.statistic) for e in signed} == {
            (mallory, 4.0, STATISTIC),
            (eve, 1.0, STATISTIC),
        }
        (against_mallory,) = [e for e in signed if e.accused == mallory]
        assert against_mallory.reason.startswith(
            "4 call(s) refused; the first: backward of ffn.0.1"
        )
        assert server.accused == 2
        assert await server.flush() == []  # a quiet window accuses nobody
        found = await poll_until(backbone.collect, lambda got: len(got) > 0)
        assert sorted(found, key=lambda e: e.value or 0) == sorted(
            signed, key=lambda e: e.value or 0
        )
        assert reported == found
        # a later window's calls are a new accusation; the earlier ones are not passed on again
        clock.advance(60)
        server.refused(nan_call(mallory))
        (later,) = await server.flush()
        again = await poll_until(backbone.collect, lambda got: len(got) > 0)
        assert again == [later]
        assert later.chunk != against_mallory.chunk
        assert len(reported) == 3
    finally:
        await backbone_dht.close()
        await server_dht.close()


async def test_a_crowd_of_poisoners_is_counted_beyond_the_accused(make_host: MakeHost) -> None:
    host, dht = await start_node(make_host, None)
    try:
        board = EvidenceBoard(dht, host.identity, PROJECT)
        with pytest.raises(ValueError, match="at least 10 seconds"):
            RefusedCalls(board, window=1.0)  # two windows would share one accusation's slot
        calls = RefusedCalls(board)
        crowd = [Identity.generate().peer_id for _ in range(MAX_ACCUSED + 4)]
        for caller in crowd:
            calls.refused(nan_call(caller))
        calls.refused(nan_call(crowd[0]))  # an accused caller's later call still counts
        signed = await calls.flush()
        assert len(signed) == MAX_ACCUSED
        assert calls.unaccused == 4
        assert {e.accused for e in signed} == set(crowd[:MAX_ACCUSED])
        assert max(e.value or 0 for e in signed) == 2.0
    finally:
        await dht.close()
