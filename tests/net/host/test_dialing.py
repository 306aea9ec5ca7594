"""Dialing several addresses: the order, the stagger, the first success (core.net.host.dialing)."""

from __future__ import annotations

import asyncio

import pytest

from core.net import Identity, PeerAddress
from core.net.host.dialing import AllAttemptsFailed, dial_order, first_success

PEER = Identity.generate().peer_id
RELAY = Identity.generate().peer_id


def test_dial_order_public_lan_name_loopback_relay() -> None:
    given = [
        PeerAddress.parse(f"relay:{RELAY}/{PEER}"),
        PeerAddress.tcp("127.0.0.1", 1, PEER),
        PeerAddress.tcp("10.1.2.3", 1, PEER),
        PeerAddress.tcp("peer.example.org", 1, PEER),
        PeerAddress.tcp("198.51.100.10", 1, PEER),
        PeerAddress.tcp("10.1.2.3", 1, PEER),
    ]
    order = [a.host or "relay" for a in dial_order(given)]
    assert order == ["198.51.100.10", "10.1.2.3", "peer.example.org", "127.0.0.1", "relay"]


async def test_a_slow_first_address_does_not_delay_the_second_beyond_the_stagger() -> None:
    started: list[str] = []
    release = asyncio.Event()

    async def slow() -> str:
        started.append("slow")
        await release.wait()
        return "slow"

    async def fast() -> str:
        started.append("fast")
        return "fast"

    discarded: list[str] = []

    async def discard(value: str) -> None:
        discarded.append(value)

    assert await first_success([slow, fast], stagger=0.05, discard=discard) == "fast"
    assert started == ["slow", "fast"]
    assert discarded == []  # the slow one was cancelled, nothing to close


async def test_a_failure_starts_the_next_attempt_at_once() -> None:
    loop = asyncio.get_running_loop()
    begun: dict[str, float] = {}

    async def fails() -> str:
        begun["fails"] = loop.time()
        raise OSError("refused")

    async def works() -> str:
        begun["works"] = loop.time()
        return "ok"

    async def discard(value: str) -> None:
        raise AssertionError("nothing to discard")

    # a stagger of an hour: only the failure can have started the second attempt
    assert await first_success([fails, works], stagger=3600, discard=discard) == "ok"
    assert begun["works"] - begun["fails"] < 60


async def test_all_failing_reports_every_error_in_order() -> None:
    async def one() -> str:
        raise OSError("first")

    async def two() -> str:
        raise OSError("second")

    async def discard(value: str) -> None:
        raise AssertionError("nothing to discard")

    with pytest.raises(AllAttemptsFailed) as failed:
        await first_success([one, two], stagger=0.01, discard=discard)
    assert [str(e) for e in failed.value.errors] == ["first", "second"]


async def test_late_winners_are_discarded() -> None:
    gate = asyncio.Event()

    async def both() -> str:
        await gate.wait()
        return "value"

    async def opener() -> str:
        await asyncio.sleep(0.02)  # a dial that takes a while: the first attempt is waiting by then
        gate.set()
        return await both()

    discarded: list[str] = []

    async def discard(value: str) -> None:
        discarded.append(value)

    winner = await first_success([both, opener], stagger=0.001, discard=discard)
    assert winner == "value"
    assert discarded == ["value"]  # the second finished in the same turn and was closed
