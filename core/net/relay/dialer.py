"""RelayDialer: dialing a peer at a relayed address, and the circuits our connections run over.

Any Host can dial ``relay:<relay>/<peer>`` once a ``RelayDialer`` is installed on it; holding a
reservation (``relay_client``) is only needed to be dialed. The dialer asks the relay over a direct
connection (``relay.connect``), and once the relay says the target accepted, hands the Host the
circuit as a transport; the Host then runs TLS over it and checks that the expected peer answers,
exactly as over TCP.

The dialer also keeps every circuit of its Host (ours and, through ``adopt``, those the relay client
accepted) and ties each one to the connection that runs over it, so that when a relay ends a
circuit the connection closes with the relay's reason rather than a bare "connection lost".
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, TypeVar

from core.net.errors import DialError, RpcError, StreamClosedError
from core.net.relay.circuit import Circuit
from core.net.relay.messages import (
    CONNECT,
    CircuitAccepted,
    CircuitEnd,
    ConnectRequest,
    RelayRefused,
    RelayStatus,
)
from core.util.errors import WireFormatError

if TYPE_CHECKING:
    from core.net.host.address import PeerAddress
    from core.net.host.host import Host
    from core.net.wire.connection import CallStream, Connection

_M = TypeVar("_M", CircuitEnd, CircuitAccepted)

CIRCUIT_CALL_TIMEOUT = 24 * 3600.0
"""The deadline of a ``relay.connect`` call: the relay's own limits end circuits long before."""


class RelayDialer:
    """Opens circuits through relays for one Host (installed as ``host.relay_dialer``)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._circuits: list[Circuit] = []
        host.relay_dialer = self.dial
        host.on_connection(self._bind)

    @property
    def circuits(self) -> list[Circuit]:
        """Circuits still open, either direction."""
        self._circuits = [c for c in self._circuits if not c.closed]
        return list(self._circuits)

    async def dial(self, address: PeerAddress) -> asyncio.Transport:
        """A transport to ``address``'s peer through its relay (``Host.relay_dialer``)."""
        relay = address.relay_id
        target = address.require_peer()
        if relay is None:
            raise DialError(f"{address} is not a relayed address")
        if relay == self.host.peer_id:
            raise DialError("the relay in that address is ourselves")
        conn = await self.host.connect(relay)
        if conn.relayed_via is not None:
            # chains of relays would multiply every byte's cost and hide who carries what
            raise DialError(f"relay {relay} is reachable only through another relay")
        stream = conn.open_stream(
            CONNECT.name, ConnectRequest(target).to_wire(), timeout=CIRCUIT_CALL_TIMEOUT
        )
        try:
            async with asyncio.timeout(self.host.config.call_timeout):
                await self._accepted(stream, relay_name=relay.short())
            circuit = Circuit(stream, relay=relay, peer=target)
            transport = await circuit.open(dialing=True)
        except BaseException:
            if not stream.done:
                stream.cancel()
            raise
        self.adopt(circuit)
        return transport

    async def _accepted(self, stream: CallStream, *, relay_name: str) -> CircuitAccepted:
        try:
            first = await stream.recv_message()
        except StreamClosedError:
            if not stream.done:
                raise DialError(f"relay {relay_name} sent raw data before accepting") from None
            try:
                raw = await stream.result()
            except RpcError as exc:
                raise DialError(f"relay {relay_name} failed: {exc}") from None
            end = _parse(CircuitEnd, raw, relay_name)
            raise RelayRefused(
                end.status, f"relay {relay_name} refused the circuit: {end.reason}"
            ) from None
        except RpcError as exc:  # not a relay (unknown method), or the link failed
            raise DialError(f"relay {relay_name} failed: {exc}") from None
        return _parse(CircuitAccepted, first, relay_name)

    def adopt(self, circuit: Circuit) -> None:
        """Keep ``circuit`` and tie it to the connection that will run over it."""
        self._circuits = [c for c in self._circuits if not c.closed]
        self._circuits.append(circuit)

    def _bind(self, conn: Connection) -> None:
        if conn.relayed_via is None:
            return
        for circuit in self._circuits:
            if (
                circuit.connection is None
                and not circuit.closed
                and circuit.relay == conn.relayed_via
                and circuit.peer == conn.peer
            ):
                circuit.connection = conn
                return

    async def close(self) -> None:
        """End every circuit (their connections break) and stop dialing through relays."""
        if self.host.relay_dialer == self.dial:
            self.host.relay_dialer = None
        circuits, self._circuits = self._circuits, []
        for circuit in circuits:
            with contextlib.suppress(Exception):
                await circuit.close("we stopped using relays")


def _parse(cls: type[_M], raw: object, relay_name: str) -> _M:
    try:
        return cls.from_wire(raw)
    except WireFormatError as exc:
        raise RelayRefused(
            RelayStatus.MALFORMED, f"relay {relay_name} answered malformed: {exc}"
        ) from None
