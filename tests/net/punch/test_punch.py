"""Hole punching on one computer: the socket mechanics, the protocol, its refusals, stats.

The relay is not needed: a direct loopback connection whose two ends get a ``relayed_via`` (a fake
relay's PeerID) stands in for a relayed one, which is all the punch protocol looks at.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from core.net import Host, Identity
from core.net.errors import InvalidRequestError, PermissionDeniedError, ResourceExhaustedError
from core.net.punch.candidates import PunchOffer, Whereabouts, dial_targets, make_offer
from core.net.punch.dial import DialFailure, connect_from
from core.net.punch.puncher import CONNECT, SYNC, HolePuncher, PunchSync
from core.net.punch.timing import PunchTiming
from core.net.wire.connection import Connection
from tests.conftest import MakeHost
from tests.support.leaks import wait_until

QUICK = PunchTiming(dial_window=1.5, retry_pause=0.1, relay_grace=0.2)


async def fake_relayed(a: Host, b: Host) -> tuple[Connection, Connection]:
    """A connection a -> b that both ends take for one through a relay."""
    ab = await a.connect(b.addresses[0])
    await wait_until(lambda: bool(b.connections(a.peer_id)))
    (ba,) = b.connections(a.peer_id)
    relay = Identity.generate().peer_id
    ab.relayed_via = relay
    ba.relayed_via = relay
    return ab, ba


@pytest.fixture
async def pair(make_host: MakeHost) -> AsyncIterator[tuple[Host, Host, HolePuncher, HolePuncher]]:
    a, b = await make_host(), await make_host()
    pa, pb = HolePuncher(a, QUICK), HolePuncher(b, QUICK)
    pa.start()
    pb.start()
    yield a, b, pa, pb
    await pa.close()
    await pb.close()


# ---- the sockets ---------------------------------------------------------------------------------


async def test_crossing_connects_from_listening_ports_make_one_tcp_connection() -> None:
    loop = asyncio.get_running_loop()
    accepted: list[socket.socket] = []

    def on_accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer.get_extra_info("socket"))
        writers.append(writer)

    writers: list[asyncio.StreamWriter] = []
    servers = [
        await asyncio.start_server(on_accept, "127.0.0.1", 0, reuse_port=True) for _ in range(2)
    ]
    pa, pb = (s.sockets[0].getsockname()[1] for s in servers)
    deadline = loop.time() + 0.6
    results = await asyncio.gather(
        connect_from(("127.0.0.1", pa), ("127.0.0.1", pb), deadline=deadline, redial_gap=0.05),
        connect_from(("127.0.0.1", pb), ("127.0.0.1", pa), deadline=deadline, redial_gap=0.05),
        return_exceptions=True,
    )
    try:
        ends = [r.get_extra_info("socket") for r in results if isinstance(r, asyncio.Transport)]
        pairs = {frozenset((s.getsockname(), s.getpeername())) for s in [*ends, *accepted]}
        assert pairs == {frozenset((("127.0.0.1", pa), ("127.0.0.1", pb)))}  # one connection
        for failed in (r for r in results if isinstance(r, BaseException)):
            # the loser found its pair of ports connected (the winner reached its listener)
            assert "already connected" in str(failed)
    finally:
        for r in results:
            if isinstance(r, asyncio.Transport):
                r.abort()
        for w in writers:
            w.transport.abort()
        for s in servers:
            s.close()
            await s.wait_closed()


async def test_a_closed_port_is_retried_until_the_deadline_then_named() -> None:
    loop = asyncio.get_running_loop()
    with socket.socket() as holder:  # a free local port to dial from
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
    with pytest.raises(Exception, match=r"127\.0\.0\.1:9: ") as info:
        # port 9 (discard) is closed here: refused at once, retried until the deadline
        await connect_from(
            ("127.0.0.1", port), ("127.0.0.1", 9), deadline=loop.time() + 0.3, redial_gap=0.05
        )
    failure: DialFailure = info.value.failure  # type: ignore[attr-defined]
    assert failure.answered


# ---- the whole punch -----------------------------------------------------------------------------


async def test_punch_over_a_relayed_connection_gives_a_punched_direct_one(
    pair: tuple[Host, Host, HolePuncher, HolePuncher],
) -> None:
    a, b, pa, pb = pair
    ab, ba = await fake_relayed(a, b)
    assert await pa.punch(ab)
    direct_a = [c for c in a.connections(b.peer_id) if c.relayed_via is None]
    assert len(direct_a) == 1
    assert direct_a[0].punched
    assert direct_a[0].initiator
    await wait_until(lambda: any(c.relayed_via is None for c in b.connections(a.peer_id)))
    (direct_b,) = [c for c in b.connections(a.peer_id) if c.relayed_via is None]
    assert direct_b.punched
    assert not direct_b.initiator
    assert direct_b.peer == a.peer_id
    assert await a.connect(b.peer_id) is direct_a[0]  # preferred over the relay
    assert (pa.stats.attempted, pa.stats.succeeded, pa.stats.failed) == (1, 1, 0)
    assert pb.stats.answered == 1
    await wait_until(lambda: ab.is_closed and ba.is_closed)  # the relay, retired when idle
    assert direct_a[0].is_usable


async def test_a_relayed_connection_we_dialed_starts_the_punch_by_itself(
    pair: tuple[Host, Host, HolePuncher, HolePuncher],
) -> None:
    a, b, pa, _ = pair
    ab, _ = await fake_relayed(a, b)
    # what the Host does when a relayed connection registers (relayed_via is set at creation)
    a._connection_listeners[-1](ab)
    await wait_until(lambda: pa.stats.succeeded == 1)


async def test_failure_is_logged_once_and_the_pair_backs_off(
    pair: tuple[Host, Host, HolePuncher, HolePuncher], caplog: pytest.LogCaptureFixture
) -> None:
    a, b, pa, pb = pair
    ab = await a.connect(b.addresses[0])
    ab.relayed_via = Identity.generate().peer_id  # a's end only: b sees a direct connection
    caplog.set_level(logging.INFO, logger="core.net.punch.puncher")
    assert not await pa.punch(ab)
    assert pa.stats.failed == 1
    assert "refused" in (pa.stats.last_reason or "")
    assert "relayed connection" in (pa.stats.last_reason or "")
    lines = [r.getMessage() for r in caplog.records if "hole punching to" in r.getMessage()]
    assert len(lines) == 1
    assert "staying on the relay" in lines[0]
    assert pa.maybe_punch(ab) is None  # backing off
    assert pb.stats.refused == 1


# ---- refusals ------------------------------------------------------------------------------------


async def call(conn: Connection, method: str, request: Any) -> Any:
    return await conn.call(method, request)


async def test_punch_calls_over_a_direct_connection_are_refused(
    pair: tuple[Host, Host, HolePuncher, HolePuncher],
) -> None:
    a, b, _, pb = pair
    ab = await a.connect(b.addresses[0])
    offer = make_offer(Whereabouts(a.listening_port or 0, [], [], [], True), 1)
    with pytest.raises(PermissionDeniedError, match="only over a relayed connection"):
        await call(ab, CONNECT.name, offer.to_wire())
    with pytest.raises(PermissionDeniedError, match="only over a relayed connection"):
        await call(ab, SYNC.name, PunchSync(1, 0.01).to_wire())
    assert pb.stats.refused == 2
    await ab.ping()  # only the calls failed, not the connection


async def test_sync_from_a_peer_that_agreed_nothing_is_refused(
    pair: tuple[Host, Host, HolePuncher, HolePuncher],
) -> None:
    a, b, _, _ = pair
    ab, _ = await fake_relayed(a, b)
    with pytest.raises(PermissionDeniedError, match=r"without a punch\.connect"):
        await call(ab, SYNC.name, PunchSync(1, 0.01).to_wire())
    offer = PunchOffer(1, [], [("127.0.0.1", a.listening_port or 1)])
    await call(ab, CONNECT.name, offer.to_wire())
    with pytest.raises(InvalidRequestError, match="round 2, but round 1"):
        await call(ab, SYNC.name, PunchSync(2, 0.01).to_wire())


@pytest.mark.parametrize(
    ("offer", "reason"),
    [
        (PunchOffer(1, [("example.org", 4001)]), "not an IP address"),
        (PunchOffer(1, [("198.51.100.11", 0)]), "port 0 .* out of range"),
        (PunchOffer(1, [("198.51.100.11", 70000)]), "port 70000 .* out of range"),
        (PunchOffer(1, [("10.0.0.5", 4001)]), "10.0.0.5:4001 is not a public address"),
        (PunchOffer(1, [("127.0.0.1", 4001)]), "is not a public address"),
        (PunchOffer(1, [("198.51.100.11", p) for p in range(4001, 4010)]), "at most 8"),
        (PunchOffer(1, [], [("198.51.100.11", 4001)]), "is not a LAN address"),
        (PunchOffer(0, [("198.51.100.11", 4001)]), "attempt 0 is out of range"),
    ],
)
async def test_malformed_candidates_are_refused_with_the_reason(
    pair: tuple[Host, Host, HolePuncher, HolePuncher], offer: PunchOffer, reason: str
) -> None:
    a, b, _, pb = pair
    ab, _ = await fake_relayed(a, b)
    with pytest.raises(InvalidRequestError, match=reason):
        await call(ab, CONNECT.name, offer.to_wire())
    with pytest.raises(InvalidRequestError, match=r"Candidate|expected"):
        await call(ab, CONNECT.name, [1, [["198.51.100.11", "4001"]], []])
    assert pb.stats.last_refusal is not None


def test_loopback_from_another_computer_is_refused_and_lan_only_used_behind_one_router() -> None:
    far = Whereabouts(4001, [("198.51.100.12", 50000)], [], [("10.201.2.2", 4001)], False)
    with pytest.raises(InvalidRequestError, match="loopback address, and we are on another"):
        dial_targets(PunchOffer(1, [], [("127.0.0.1", 4001)]), far)
    offer = PunchOffer(1, [("198.51.100.11", 4001)], [("10.201.1.2", 4001)])
    assert dial_targets(offer, far) == [("198.51.100.11", 4001)]  # another home: LAN skipped
    near = Whereabouts(4001, [("198.51.100.11", 50000)], [], [("10.201.1.3", 4001)], False)
    assert dial_targets(offer, near) == [("198.51.100.11", 4001), ("10.201.1.2", 4001)]


def test_our_offer_puts_the_listening_port_on_observed_ips_first() -> None:
    where = Whereabouts(
        port=4001,
        observed=[("198.51.100.11", 51234)],
        confirmed=[],
        interfaces=[("10.201.1.2", 4001), ("198.51.100.99", 4001)],
        loopback_only=False,
    )
    offer = make_offer(where, 2)
    assert offer.attempt == 2
    assert offer.public == [
        ("198.51.100.11", 4001),
        ("198.51.100.99", 4001),
        ("198.51.100.11", 51234),
    ]
    assert offer.lan == [("10.201.1.2", 4001)]


async def test_a_burst_of_punch_requests_is_refused_and_only_those_calls_fail(
    pair: tuple[Host, Host, HolePuncher, HolePuncher],
) -> None:
    a, b, _, pb = pair
    ab, _ = await fake_relayed(a, b)
    offer = PunchOffer(1, [], [("127.0.0.1", a.listening_port or 1)]).to_wire()
    for _ in range(2 * QUICK.attempts):
        await call(ab, CONNECT.name, offer)
    with pytest.raises(ResourceExhaustedError, match="too many punch requests"):
        await call(ab, CONNECT.name, offer)
    await ab.ping()
    assert pb.stats.refused == 1
