"""A real relay Host on loopback, attacked the cheap ways: reservations and circuits flooded with
fresh identities from one address and from many, circuits held open in silence, and a stream that
is written to and never read. Each limit holds, the relay's memory stays bounded, and honest peers
still get through.

Other computers are other loopback addresses: Linux routes all of 127.0.0.0/8 to the loopback
interface, so a connection bound to 127.0.0.2 reaches the relay from 127.0.0.2 as if from another
household, and one from 127.0.1.2 from another network (/24).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from core.net import CallContext, Host, Identity, NetConfig, Stream
from core.net.errors import DialError, NetError, StreamClosedError
from core.net.host.inbound import Unwrapped
from core.net.relay.client import RelayClient
from core.net.relay.dialer import RelayDialer
from core.net.relay.limits import RelayLimits
from core.net.relay.messages import (
    CONNECT,
    INCOMING,
    RESERVE,
    CircuitAccepted,
    CircuitEnd,
    ConnectRequest,
    IncomingCircuit,
    RelayStatus,
    ReserveRequest,
    ReserveResponse,
)
from core.net.relay.service import RelayService
from core.net.wire.connection import CallStream, Connection
from core.util.errors import ConfigError
from tests.conftest import FAST, MakeHost
from tests.support.leaks import HANG_GUARD, wait_until

KiB = 1024
OK, LIMIT = RelayStatus.OK, RelayStatus.LIMIT


def _whole_loopback_block() -> bool:
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
    except OSError:
        return False
    return True


pytestmark = pytest.mark.skipif(
    not _whole_loopback_block(), reason="needs all of 127.0.0.0/8 on loopback (Linux has it)"
)


async def link_from(host: Host, relay: Host, ip: str) -> Connection:
    """``host``'s connection to ``relay`` from ``ip``, as if ``host`` ran on another computer."""
    where = relay.listen_addresses[0]
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(
        Unwrapped, where.host, where.port, local_addr=(ip, 0)
    )
    return await host.secure_outbound(transport, relay.peer_id)


def serve_echo(host: Host) -> None:
    async def echo(ctx: CallContext, request: Any) -> Any:
        return request

    host.router.add_raw("test.echo", echo)


def relayed(relay: Host, peer: Host) -> str:
    return f"relay:{relay.peer_id}/{peer.peer_id}"


@dataclass
class Relay:
    """A relay Host, and the attackers and honest peers around it; all closed at the end."""

    make_host: MakeHost
    host: Host
    service: RelayService
    clients: list[RelayClient] = field(default_factory=list)
    dialers: list[RelayDialer] = field(default_factory=list)
    private: list[Host] = field(default_factory=list)

    async def peer(self, ip: str, config: NetConfig = FAST) -> Host:
        """A fresh identity connected to the relay from ``ip``."""
        host = await self.make_host(config)
        await link_from(host, self.host, ip)
        return host

    async def reserve(self, host: Host) -> ReserveResponse:
        answer: ReserveResponse = await host.call(self.host.peer_id, RESERVE, ReserveRequest())
        return answer

    async def honest_target(self, ip: str) -> Host:
        """A private peer (listening nowhere) that holds a reservation and answers ``test.echo``."""
        host = Host(Identity.generate(), FAST)
        self.private.append(host)
        await host.start([])
        await link_from(host, self.host, ip)
        relay = self.host.peer_id
        client = RelayClient(host, candidates=lambda: [relay], want=1)
        self.clients.append(client)
        client.start()
        await wait_until(lambda: client.relays == [relay])
        serve_echo(host)
        return host

    async def honest_dialer(self, ip: str) -> Host:
        """A peer that reaches others through the relay, from ``ip``."""
        host = await self.peer(ip)
        self.dialers.append(RelayDialer(host))
        return host

    async def hostile_target(self, ip: str, config: NetConfig = FAST) -> Host:
        """A peer that holds a reservation, accepts every circuit, then neither reads nor writes."""
        host = await self.peer(ip, config)

        async def accept(ctx: CallContext, request: IncomingCircuit, stream: Stream) -> CircuitEnd:
            terms = request.terms
            await stream.send(CircuitAccepted(terms.circuit_seconds, terms.circuit_bytes).to_wire())
            await asyncio.Event().wait()  # until the relay gives up on the call
            return CircuitEnd(RelayStatus.CLOSED, "never")

        host.router.add_stream(INCOMING, accept)
        assert (await self.reserve(host)).status is OK
        return host

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        for dialer in self.dialers:
            await dialer.close()
        await self.service.close()
        for host in self.private:
            await host.close()


StartRelay = Callable[..., Awaitable[Relay]]


@pytest.fixture
async def relay_at(make_host: MakeHost) -> AsyncIterator[StartRelay]:
    started: list[Relay] = []

    async def start(limits: RelayLimits, config: NetConfig = FAST) -> Relay:
        host = await make_host(config)
        service = RelayService(host, limits)
        service.start()
        relay = Relay(make_host, host, service)
        started.append(relay)
        return relay

    yield start
    for relay in started:
        await relay.close()


async def open_circuit(
    source: Host, relay: Host, target: Host
) -> tuple[CallStream, CircuitEnd | None]:
    """Ask ``relay`` for a circuit to ``target`` by hand: the stream, and the refusal if any."""
    link = await source.connect(relay.peer_id)
    stream = link.open_stream(CONNECT.name, ConnectRequest(target.peer_id).to_wire(), timeout=60.0)
    try:
        CircuitAccepted.from_wire(await stream.recv_message())
    except StreamClosedError:
        return stream, CircuitEnd.from_wire(await stream.result())
    return stream, None


# ---- reservations ------------------------------------------------------------------------------


async def test_a_reservation_flood_from_one_address_leaves_room_for_others(
    relay_at: StartRelay,
) -> None:
    r = await relay_at(RelayLimits(max_reservations=8, max_reservations_per_ip=3))
    flood = [await r.peer("127.0.0.1") for _ in range(10)]
    answers = [await r.reserve(host) for host in flood]
    assert [answer.status for answer in answers] == [OK] * 3 + [LIMIT] * 7
    assert {answer.reason for answer in answers[3:]} == {
        "too many reservations from 127.0.0.1 (limit 3)"
    }
    assert len(r.service.reservations) == 3
    # an honest peer at another address still reserves a slot, and is reached through it
    b = await r.honest_target("127.0.0.2")
    a = await r.honest_dialer("127.0.0.3")
    assert await a.call_raw(relayed(r.host, b), "test.echo", 1) == 1
    assert len(r.service.reservations) == 4


async def test_a_reservation_flood_from_many_addresses_is_bounded_per_network_and_in_all(
    relay_at: StartRelay,
) -> None:
    limits = RelayLimits(
        max_reservations=6, max_reservations_per_ip=2, max_reservations_per_prefix=4
    )
    r = await relay_at(limits)
    # one fresh identity at each of eight addresses of one /24: within the per-address limit
    block = [await r.peer(f"127.0.0.{n}") for n in range(10, 18)]
    answers = [await r.reserve(host) for host in block]
    assert [answer.status for answer in answers] == [OK] * 4 + [LIMIT] * 4
    assert {answer.reason for answer in answers[4:]} == {
        "too many reservations from 127.0.0.0/24 (limit 4)"
    }
    # another network is not held back by that one
    await r.honest_target("127.0.1.2")
    # an attacker spread over many networks fills the relay, and no more
    spread = [await r.peer(f"127.{n}.0.1") for n in range(2, 8)]
    answers = [await r.reserve(host) for host in spread]
    assert [answer.status for answer in answers] == [OK] + [LIMIT] * 5
    assert {answer.reason for answer in answers[1:]} == {
        "the relay holds its maximum of 6 reservations"
    }
    assert len(r.service.reservations) == limits.max_reservations
    # the flood's slots come back as its connections go
    for host in block[:2]:
        await host.close()
    await wait_until(lambda: not any(r.host.connections(h.peer_id) for h in block[:2]))
    newcomers = [await r.peer(f"127.0.{n}.1") for n in (2, 3)]
    assert [(await r.reserve(host)).status for host in newcomers] == [OK, OK]
    assert len(r.service.reservations) == limits.max_reservations


# ---- circuits ----------------------------------------------------------------------------------


async def test_a_circuit_flood_stops_at_the_address_network_and_total_limits(
    relay_at: StartRelay,
) -> None:
    r = await relay_at(
        RelayLimits(
            max_circuits=5,
            max_circuits_per_peer=2,
            max_circuits_per_ip=2,
            max_circuits_per_prefix=3,
        )
    )
    targets = [await r.hostile_target("127.0.9.1") for _ in range(4)]
    held: list[CallStream] = []

    async def ask(source: Host, target: Host) -> CircuitEnd | None:
        stream, refused = await open_circuit(source, r.host, target)
        if refused is None:
            held.append(stream)
        return refused

    # fresh identities from one address: two circuits, then refused
    flood = [await r.peer("127.0.0.1") for _ in range(4)]
    refusals = [await ask(source, targets[n]) for n, source in enumerate(flood)]
    assert refusals[:2] == [None, None]
    assert {(end.status, end.reason) for end in refusals[2:] if end} == {
        (LIMIT, "127.0.0.1 asked for 2 circuits already (limit 2)")
    }
    assert r.service.circuits == 2
    # more addresses of the same network: one more, then the network's limit
    neighbours = [await r.peer(f"127.0.0.{n}") for n in (20, 21)]
    assert await ask(neighbours[0], targets[2]) is None
    refused = await ask(neighbours[1], targets[3])
    assert refused is not None
    assert refused.reason == "127.0.0.0/24 asked for 3 circuits already (limit 3)"
    # an honest pair in other networks still gets a circuit
    b = await r.honest_target("127.0.1.2")
    a = await r.honest_dialer("127.0.2.3")
    assert await a.call_raw(relayed(r.host, b), "test.echo", 1) == 1
    # another network fills the relay: the total holds
    elsewhere = [await r.peer("127.0.3.1") for _ in range(2)]
    assert await ask(elsewhere[0], targets[3]) is None
    refused = await ask(elsewhere[1], targets[3])
    assert refused is not None
    assert refused.reason == "the relay carries its maximum of 5 circuits"
    assert r.service.circuits == 5
    c = await r.honest_dialer("127.0.4.1")
    with pytest.raises(DialError, match="maximum of 5 circuits"):
        await c.call_raw(relayed(r.host, b), "test.echo", 2)
    # once the flood gives up its circuits, honest peers get them back
    for stream in held:
        stream.cancel()
    await wait_until(lambda: r.service.circuits == 1)
    assert await c.call_raw(relayed(r.host, b), "test.echo", 3) == 3


async def test_a_circuit_held_open_in_silence_ends_and_frees_its_slot(
    relay_at: StartRelay,
) -> None:
    r = await relay_at(RelayLimits(max_circuits=1, circuit_idle_seconds=0.5))
    target = await r.hostile_target("127.0.9.1")
    source = await r.peer("127.0.0.1")
    loop = asyncio.get_running_loop()
    asked = loop.time()
    stream, refused = await open_circuit(source, r.host, target)
    assert refused is None
    async with asyncio.timeout(HANG_GUARD):
        last = CircuitEnd.from_wire(await stream.recv_message())  # the relay's last word
    assert (last.status, last.reason) == (
        RelayStatus.TIME_LIMIT,
        "nothing crossed the circuit for 0.5 s",
    )
    assert loop.time() - asked >= 0.5
    await wait_until(lambda: r.service.circuits == 0)
    b = await r.honest_target("127.0.1.2")
    a = await r.honest_dialer("127.0.2.3")
    assert await a.call_raw(relayed(r.host, b), "test.echo", 1) == 1


async def test_a_busy_circuit_stays_and_a_silent_one_ends_with_the_reason(
    relay_at: StartRelay,
) -> None:
    r = await relay_at(RelayLimits(circuit_idle_seconds=1.0))
    b = await r.honest_target("127.0.1.2")
    a = await r.honest_dialer("127.0.2.3")
    assert await a.call_raw(relayed(r.host, b), "test.echo", 0) == 0
    (conn,) = a.connections(b.peer_id)
    loop = asyncio.get_running_loop()
    until = loop.time() + 2.5  # longer than the idle limit, in calls a tenth of it apart
    while loop.time() < until:
        await asyncio.sleep(0.05)
        assert await a.call_raw(relayed(r.host, b), "test.echo", 1) == 1
    assert a.connections(b.peer_id) == [conn]
    await wait_until(lambda: conn.is_closed)
    assert "nothing crossed the circuit for 1 s" in (conn.close_reason or "")
    # the next call opens a new circuit
    assert await a.call_raw(relayed(r.host, b), "test.echo", 2) == 2


SMALL = dataclasses.replace(
    FAST, stream_chunk_bytes=64 * KiB, stream_window_bytes=256 * KiB, max_frame_bytes=256 * KiB
)
"""Small stream windows, so that a stalled circuit fills them in a moment."""


async def test_a_stream_nobody_reads_holds_bounded_memory_and_ends(relay_at: StartRelay) -> None:
    r = await relay_at(RelayLimits(stall_seconds=0.5), SMALL)
    target = await r.hostile_target("127.0.9.1", SMALL)
    source = await r.peer("127.0.0.1", SMALL)
    stream, refused = await open_circuit(source, r.host, target)
    assert refused is None
    written = 0

    async def write_forever() -> None:
        nonlocal written
        chunk = bytes(SMALL.stream_chunk_bytes)
        with contextlib.suppress(NetError):
            while True:
                await stream.send_data(chunk)
                written += len(chunk)

    writer = asyncio.create_task(write_forever())
    (to_target,) = r.host.connections(target.peer_id)
    held = unsent = 0
    try:
        async with asyncio.timeout(HANG_GUARD):
            while not writer.done():
                held = max(held, r.service.buffered)
                transport = to_target._transport
                if transport is not None:
                    unsent = max(unsent, transport.get_write_buffer_size())
                await asyncio.sleep(0.01)
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
    window = SMALL.stream_window_bytes
    # the relay held what its window let the source send it, however much the source wrote
    assert window // 2 <= held <= window + SMALL.max_frame_bytes
    assert unsent <= 4 * SMALL.stream_chunk_bytes
    assert written <= 2 * window + 2 * SMALL.max_frame_bytes  # the target's window and ours
    end = CircuitEnd.from_wire(await stream.result())
    assert end.status is RelayStatus.TIME_LIMIT
    assert end.reason == f"{target.peer_id.short()} did not take 65536 bytes within 0.5 s"
    await wait_until(lambda: r.service.circuits == 0)
    assert r.service.buffered == 0


def test_the_new_limits_are_validated() -> None:
    for name in ("circuit_idle_seconds", "stall_seconds", "max_circuits_per_prefix"):
        with pytest.raises(ConfigError, match=name):
            RelayLimits(**{name: 0})
