"""Bad input to a relay: refused with a reason, affecting only the circuit concerned."""

from __future__ import annotations

from typing import Any

import pytest

from core.net import CallContext, Host, Identity
from core.net.errors import DialError, InvalidRequestError, NetError
from core.net.relay.messages import (
    CONNECT,
    INCOMING,
    RESERVE,
    CircuitAccepted,
    CircuitEnd,
    ConnectRequest,
    RelayStatus,
)
from tests.net.conftest import RelayWorld, relayed
from tests.net.host.test_access import Project


def serve_echo(host: Host) -> None:
    async def echo(ctx: CallContext, request: Any) -> Any:
        return request

    host.router.add_raw("test.echo", echo)


async def test_malformed_requests_are_refused_and_the_relay_carries_on(
    relays: RelayWorld,
) -> None:
    r, _ = await relays.relay()
    b, _ = await relays.private_peer(r)
    serve_echo(b)
    a = await relays.dialer()
    a.add_addresses(r.peer_id, r.listen_addresses)
    assert await a.call_raw(relayed(r, b), "test.echo", 1) == 1  # a circuit that must survive
    link = await a.connect(r.peer_id)
    with pytest.raises(InvalidRequestError, match="malformed request"):
        await link.call(RESERVE.name, "not a request")
    stream = link.open_stream(CONNECT.name, [12345])
    with pytest.raises(InvalidRequestError, match="target"):
        await stream.result()
    with pytest.raises(InvalidRequestError):  # a relay.connect that is not a stream
        await link.call(CONNECT.name, ConnectRequest(b.peer_id).to_wire())
    # the relay's own offers are not for us to answer either
    with pytest.raises(NetError):
        await link.call(INCOMING.name, [])
    assert await a.call_raw(relayed(r, b), "test.echo", 2) == 2
    assert link.is_usable


async def test_data_before_acceptance_ends_only_that_circuit(relays: RelayWorld) -> None:
    r, _ = await relays.relay()
    b, _ = await relays.private_peer(r)
    serve_echo(b)
    a = await relays.dialer()
    a.add_addresses(r.peer_id, r.listen_addresses)
    assert await a.call_raw(relayed(r, b), "test.echo", 1) == 1
    link = await a.connect(r.peer_id)
    stream = link.open_stream(CONNECT.name, ConnectRequest(b.peer_id).to_wire())
    await stream.send_data(b"\x16\x03\x01 eager bytes before the relay said yes")
    end = CircuitEnd.from_wire(await stream.result())
    assert end.status is RelayStatus.MALFORMED
    assert end.reason == "the source sent raw data before the circuit was accepted"
    assert await a.call_raw(relayed(r, b), "test.echo", 2) == 2


async def test_a_message_on_an_open_circuit_ends_it(relays: RelayWorld) -> None:
    r, _ = await relays.relay()
    b, _ = await relays.private_peer(r)
    serve_echo(b)
    a = await relays.dialer()
    a.add_addresses(r.peer_id, r.listen_addresses)
    link = await a.connect(r.peer_id)
    stream = link.open_stream(CONNECT.name, ConnectRequest(b.peer_id).to_wire())
    CircuitAccepted.from_wire(await stream.recv_message())
    await stream.send(["not", "ciphertext"])
    last = CircuitEnd.from_wire(await stream.recv_message())
    assert last.status is RelayStatus.MALFORMED
    assert "sent a message on an open circuit" in last.reason
    assert CircuitEnd.from_wire(await stream.result()) == last
    assert await a.call_raw(relayed(r, b), "test.echo", 3) == 3


async def test_moderated_peers_admit_only_passes_through_a_relay(relays: RelayWorld) -> None:
    project = Project()
    ids = {name: Identity.generate() for name in ("relay", "bob", "carol", "mallory")}
    r, _ = await relays.relay(access=project.gate(ids["relay"], "relay"), identity=ids["relay"])
    b, _ = await relays.private_peer(r, access=project.gate(ids["bob"], "bob"), identity=ids["bob"])
    serve_echo(b)
    carol = await relays.dialer(access=project.gate(ids["carol"], "carol"), identity=ids["carol"])
    carol.add_addresses(r.peer_id, r.listen_addresses)
    assert await carol.call_raw(relayed(r, b), "test.echo", "hello") == "hello"
    # mallory's pass was revoked by bob only: the relay lets her through, bob's own gate does not
    mallory = await relays.dialer(
        access=project.gate(ids["mallory"], "mallory"), identity=ids["mallory"]
    )
    assert b.access is not None
    b.access.set_revoked({mallory.peer_id})
    mallory.add_addresses(r.peer_id, r.listen_addresses)
    with pytest.raises(NetError, match="revoked"):
        await mallory.call_raw(relayed(r, b), "test.echo", "let me in", timeout=5.0)
    assert b.connections(mallory.peer_id) == []
    # and a peer without any pass does not even get through to the relay
    nobody = await relays.dialer()
    nobody.add_addresses(r.peer_id, r.listen_addresses)
    with pytest.raises(DialError, match="no access pass"):
        await nobody.call_raw(relayed(r, b), "test.echo", "hi", timeout=5.0)
