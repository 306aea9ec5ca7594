"""Dial-backs on loopback: the service's rules and limits, and the monitor's verdicts."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from core.net import CallContext, Host, Identity, PeerAddress
from core.net.errors import InvalidRequestError, PermissionDeniedError, ResourceExhaustedError
from core.net.host.advertise import parse_ip
from core.net.reach.dialback import (
    DIALBACK,
    OFFER,
    DialbackRequest,
    DialbackResponse,
    DialbackService,
)
from core.net.reach.dialback_limits import DialbackBudget, DialbackLimits
from core.net.reach.monitor import MonitorConfig, ReachabilityMonitor
from core.net.reach.reachability import Reachability
from core.net.wire.connection import Connection
from core.trust.peer_id import PeerID
from tests.conftest import FAST, MakeHost
from tests.support.leaks import wait_until

QUICK = MonitorConfig(settle=0.0, watch_every=0.2, retry_unknown=3600.0, call_timeout=10.0)


class DialSpy:
    """Counts the server's dial-backs (and can hold them, to fill the in-flight limit)."""

    def __init__(self, host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dials: list[PeerAddress] = []
        self.hold: asyncio.Event | None = None
        real = host.dial_fresh

        async def dial_fresh(address: PeerAddress, expected: PeerID) -> Connection:
            self.dials.append(address)
            if self.hold is not None:
                await self.hold.wait()
            return await real(address, expected)

        monkeypatch.setattr(host, "dial_fresh", dial_fresh)


@pytest.fixture
async def monitors() -> AsyncIterator[list[ReachabilityMonitor]]:
    """Monitors made by a test, closed before the hosts (whose fixture checks for leaks)."""
    made: list[ReachabilityMonitor] = []
    yield made
    for monitor in made:
        await monitor.close()


def free_port() -> int:
    """A port where nothing listens (bound for a moment, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ---- the service ---------------------------------------------------------------------------------


async def test_a_listening_asker_is_dialed_back_on_a_fresh_connection(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, asker = await make_host(), await make_host()
    DialbackService(server)
    spy = DialSpy(server, monkeypatch)
    port = asker.listening_port
    assert port is not None
    answer = await asker.call(server.addresses[0], DIALBACK, DialbackRequest(port))
    assert answer == DialbackResponse(True, f"127.0.0.1:{port}", "")
    assert spy.dials == [PeerAddress.tcp("127.0.0.1", port, asker.peer_id)]
    # the dial-back's connection is not kept by the server: only the asker's own one remains
    await wait_until(lambda: len(server.connections(asker.peer_id)) == 1)


async def test_a_port_where_nothing_listens_is_a_failed_dial_not_an_error(
    make_host: MakeHost,
) -> None:
    server, asker = await make_host(), await make_host()
    DialbackService(server)
    dead = free_port()
    answer = await asker.call(server.addresses[0], DIALBACK, DialbackRequest(dead))
    assert not answer.reachable
    assert answer.address == f"127.0.0.1:{dead}"
    assert answer.reason


async def test_the_server_offers_dialback_in_its_hello(make_host: MakeHost) -> None:
    server, asker = await make_host(), await make_host()
    DialbackService(server)
    conn = await asker.connect(server.addresses[0])
    hello = await conn.wait_ready()
    assert hello.extensions.get(OFFER) is True


async def test_requests_naming_another_ip_are_refused_without_dialing(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, asker = await make_host(), await make_host()
    DialbackService(server)
    spy = DialSpy(server, monkeypatch)
    victim = "/ip4/10.1.2.3/tcp/22"
    relayed = f"relay:{Identity.generate().peer_id}/{asker.peer_id}"
    with pytest.raises(PermissionDeniedError, match="dial-back requests for other addresses"):
        await asker.call(server.addresses[0], DIALBACK, DialbackRequest(22, [victim]))
    with pytest.raises(PermissionDeniedError, match="other addresses"):
        await asker.call(server.addresses[0], DIALBACK, DialbackRequest(22, [relayed]))
    for port in (0, 65536, -1):
        with pytest.raises(InvalidRequestError, match="out of range"):
            await asker.call(server.addresses[0], DIALBACK, DialbackRequest(port))
    assert spy.dials == []
    # each refusal was that call's alone: the connection still serves a good request
    ok = await asker.call(
        server.addresses[0],
        DIALBACK,
        DialbackRequest(asker.listening_port or 0, [f"/ip4/127.0.0.1/tcp/{asker.listening_port}"]),
    )
    assert ok.reachable
    assert len(spy.dials) == 1


async def test_a_request_through_a_relay_is_refused(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await make_host()
    service = DialbackService(server)
    spy = DialSpy(server, monkeypatch)
    asker = Identity.generate().peer_id
    relayed: Any = SimpleNamespace(relayed_via=Identity.generate().peer_id, remote_address=None)
    ctx = CallContext(asker, DIALBACK.name, relayed, None)
    with pytest.raises(PermissionDeniedError, match="through a relay"):
        await service._serve(ctx, DialbackRequest(4001))
    assert spy.dials == []
    assert service.refused == 1


@pytest.mark.parametrize(
    ("limits", "askers", "calls_each", "refusal"),
    [
        (DialbackLimits(per_peer_per_minute=2), 1, 3, "to one peer"),
        (DialbackLimits(per_ip_per_minute=2), 3, 1, "to one IP address"),
        (DialbackLimits(per_minute=2, per_ip_per_minute=10), 3, 1, "2 dial-backs a minute"),
    ],
)
async def test_rate_limits_refuse_with_a_reason_and_do_not_dial(
    make_host: MakeHost,
    monkeypatch: pytest.MonkeyPatch,
    *,
    limits: DialbackLimits,
    askers: int,
    calls_each: int,
    refusal: str,
) -> None:
    server = await make_host()
    DialbackService(server, limits)
    spy = DialSpy(server, monkeypatch)
    clients = [await make_host() for _ in range(askers)]
    results: list[str] = []
    for client in clients:
        for _ in range(calls_each):
            try:
                answer = await client.call(
                    server.addresses[0], DIALBACK, DialbackRequest(client.listening_port or 0)
                )
                results.append("ok" if answer.reachable else "failed")
            except ResourceExhaustedError as exc:
                results.append("refused" if refusal in str(exc) else f"refused: {exc}")
    assert results == ["ok", "ok", "refused"]
    assert len(spy.dials) == 2  # the refused request dialed nothing


async def test_dial_backs_in_flight_are_bounded(
    make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, first, second = await make_host(), await make_host(), await make_host()
    DialbackService(server, DialbackLimits(in_flight=1))
    spy = DialSpy(server, monkeypatch)
    spy.hold = asyncio.Event()
    pending = asyncio.ensure_future(
        first.call(server.addresses[0], DIALBACK, DialbackRequest(first.listening_port or 0))
    )
    await wait_until(lambda: len(spy.dials) == 1)
    with pytest.raises(ResourceExhaustedError, match="in progress"):
        await second.call(server.addresses[0], DIALBACK, DialbackRequest(1234))
    spy.hold.set()
    assert (await pending).reachable
    assert len(spy.dials) == 1
    # the slot is free again
    assert (
        await second.call(
            server.addresses[0], DIALBACK, DialbackRequest(second.listening_port or 0)
        )
    ).reachable


# ---- the monitor ---------------------------------------------------------------------------------


async def test_a_dialable_host_becomes_public_and_advertises_the_confirmed_address_first(
    make_host: MakeHost, monitors: list[ReachabilityMonitor]
) -> None:
    server, host = await make_host(), await make_host()
    DialbackService(server)
    changes: list[Reachability] = []
    monitor = ReachabilityMonitor(host, config=QUICK, on_change=changes.append)
    monitors.append(monitor)
    monitor.start()
    await host.connect(server.addresses[0])
    await wait_until(lambda: monitor.state is Reachability.PUBLIC)
    confirmed = PeerAddress.tcp("127.0.0.1", host.listening_port or 0, host.peer_id)
    assert host.confirmed_addresses == [confirmed]
    assert monitor.public_address == confirmed
    assert host.addresses[0] == confirmed
    assert changes == [Reachability.PUBLIC]
    assert monitor.checked_at is not None
    reached = f"{confirmed.host}:{confirmed.port}"
    assert monitor.last_reasons == [f"{server.peer_id.short()} reached us at {reached}"]
    info = monitor.diagnostics()
    assert info["state"] == "public"
    assert info["dialback_peers"] == 1
    assert info["observed"][0]["ip"] == "127.0.0.1"


async def test_three_servers_are_asked_together_and_all_must_agree(
    make_host: MakeHost, monitors: list[ReachabilityMonitor]
) -> None:
    servers = [await make_host() for _ in range(3)]
    for server in servers:
        DialbackService(server)
    host = await make_host()
    for server in servers:
        await host.connect(server.addresses[0])
    await wait_until(lambda: all(c.remote_hello for c in host.connections()))
    monitor = ReachabilityMonitor(host, config=QUICK)
    monitors.append(monitor)
    assert await monitor.check() is Reachability.PUBLIC
    assert len(monitor.classifier.outcomes()) == 3
    assert monitor.classifier.needed(3) == 3


class DeafHost(Host):
    """Listens, but says its port is one where nothing listens (as behind a NAT with no forward)."""

    dead_port = 0

    @property
    def listening_port(self) -> int | None:
        return self.dead_port


async def test_a_host_nobody_can_reach_becomes_private_and_confirms_nothing(
    make_host: MakeHost, monitors: list[ReachabilityMonitor]
) -> None:
    server = await make_host()
    DialbackService(server)
    host = DeafHost(Identity.generate(), FAST)
    host.dead_port = free_port()
    await host.start()
    try:
        monitor = ReachabilityMonitor(host, config=QUICK)
        monitors.append(monitor)
        monitor.start()
        await host.connect(server.addresses[0])
        await wait_until(lambda: monitor.state is Reachability.PRIVATE)
        assert host.confirmed_addresses == []
        assert monitor.public_address is None
        assert "could not reach us" in monitor.last_reasons[0]
        await monitor.close()
    finally:
        await host.close()


async def test_a_host_that_does_not_listen_is_private_without_asking(
    make_host: MakeHost, monitors: list[ReachabilityMonitor], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await make_host()
    DialbackService(server)
    spy = DialSpy(server, monkeypatch)
    host = Host(Identity.generate(), FAST)
    await host.start([])
    try:
        monitor = ReachabilityMonitor(host, config=QUICK)
        assert await monitor.check() is Reachability.PRIVATE
        assert monitor.last_reasons == ["we do not listen: peers cannot dial us"]
        assert spy.dials == []
    finally:
        await host.close()


async def test_peers_without_the_offer_are_not_asked(
    make_host: MakeHost, monitors: list[ReachabilityMonitor]
) -> None:
    plain, host = await make_host(), await make_host()
    await host.connect(plain.addresses[0])
    monitor = ReachabilityMonitor(host, config=QUICK)
    monitors.append(monitor)
    assert await monitor.check() is Reachability.UNKNOWN
    assert monitor.last_reasons == ["no peer that offers dial-backs is connected yet"]
    assert monitor.checked_at is None


async def test_an_answer_about_a_private_address_is_not_proof(
    make_host: MakeHost, monitors: list[ReachabilityMonitor]
) -> None:
    liar, host = await make_host(), await make_host()
    port = host.listening_port

    async def claim_lan(ctx: CallContext, request: DialbackRequest) -> DialbackResponse:
        return DialbackResponse(True, f"192.168.1.20:{request.port}")

    liar.router.add(DIALBACK, claim_lan)
    liar.offer(OFFER, True)
    await host.connect(liar.addresses[0])
    await wait_until(lambda: all(c.remote_hello for c in host.connections()))
    monitor = ReachabilityMonitor(host, config=QUICK)
    monitors.append(monitor)
    assert await monitor.check() is Reachability.UNKNOWN
    assert host.confirmed_addresses == []
    assert (
        f"dialed 192.168.1.20:{port}, not an address the internet can reach"
        in (monitor.last_reasons[0])
    )


async def test_a_real_network_host_never_takes_loopback_or_lan_as_public() -> None:
    host = Host(Identity.generate(), FAST)
    await host.start(["/ip4/0.0.0.0/tcp/0"])  # on every interface, as a volunteer's peer listens
    try:
        monitor = ReachabilityMonitor(host, config=QUICK)
        assert not monitor.loopback_host
        for text in ("127.0.0.1", "192.168.1.5", "10.0.0.2", "169.254.1.1", "0.0.0.0", "::1"):
            ip = parse_ip(text)
            assert ip is not None
            assert not monitor._public_looking(ip), text
        public = parse_ip("198.51.100.11")  # the NAT lab's "internet" (a documentation range)
        assert public is not None
        assert monitor._public_looking(public)
    finally:
        await host.close()


async def test_the_monitor_checks_again_when_the_observed_ip_changes(
    make_host: MakeHost, monitors: list[ReachabilityMonitor]
) -> None:
    server, host = await make_host(), await make_host()
    DialbackService(server, DialbackLimits(per_peer_per_minute=10))
    monitor = ReachabilityMonitor(host, config=QUICK)
    monitors.append(monitor)
    monitor.start()
    await host.connect(server.addresses[0])
    await wait_until(lambda: monitor.state is Reachability.PUBLIC and monitor.checks == 1)
    await wait_until(lambda: monitor.observed.current == "127.0.0.1")
    changes: list[Reachability] = []
    monitor.on_change = changes.append
    # two observers in other networks now see us elsewhere (the computer moved networks)
    for observer_ip in ("127.0.1.1", "127.0.2.1"):
        monitor.observed.record(Identity.generate().peer_id, observer_ip, "/ip4/127.0.0.2/tcp/9")
    assert monitor.observed.current == "127.0.0.2"
    assert monitor.state is Reachability.UNKNOWN  # old answers were about the old address
    assert host.confirmed_addresses == []
    await wait_until(lambda: monitor.checks == 2 and monitor.state is Reachability.PUBLIC)
    assert changes == [Reachability.UNKNOWN, Reachability.PUBLIC]


def test_one_block_of_addresses_gets_no_more_dial_backs_than_its_share() -> None:
    budget = DialbackBudget(DialbackLimits(per_ip_per_minute=10, per_prefix_per_minute=2))
    assert budget.admit("203.0.113.1", "a") is None
    assert budget.admit("203.0.113.2", "b") is None
    assert budget.admit("203.0.113.3", "c") == "at most 2 dial-backs a minute to one network"
    assert budget.admit("198.51.100.1", "d") is None
