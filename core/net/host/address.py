"""Peer addresses: where to dial a peer, and whom we expect to meet there.

Accepted forms (``str()`` always gives the first, multiaddr style):

- ``/ip4/127.0.0.1/tcp/4001/p2p/12D3KooW…`` (also ``/ip6/…`` and ``/dns/``, ``/dns4/``, ``/dns6/``)
- ``127.0.0.1:4001@12D3KooW…`` and ``[::1]:4001@12D3KooW…`` (short form)
- relayed: ``/ip4/…/tcp/…/p2p/<relay>/p2p-circuit/p2p/<peer>`` or ``relay:<relay PeerID>/<peer PeerID>``

The PeerID may be left out only where nothing is dialed (listen addresses).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from core.net.errors import AddressError
from core.trust.errors import PeerIdError
from core.trust.peer_id import PeerID

_HOSTNAME = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+$")
_PROTOS = ("ip4", "ip6", "dns", "dns4", "dns6")


@dataclass(frozen=True, slots=True)
class PeerAddress:
    """A direct (``host``/``port``) or relayed (``relay_id`` set) address of ``peer_id``."""

    proto: str | None
    host: str | None
    port: int | None
    peer_id: PeerID | None = None
    relay_id: PeerID | None = None

    @classmethod
    def parse(cls, text: str) -> PeerAddress:
        text = text.strip()
        if not text:
            raise AddressError("empty address")
        if text.startswith("relay:"):
            return _parse_relay_shorthand(text)
        if text.startswith("/"):
            return _parse_multiaddr(text)
        return _parse_short(text)

    @classmethod
    def tcp(cls, host: str, port: int, peer_id: PeerID | None = None) -> PeerAddress:
        proto = _proto_of(host)
        _check_port(port, host)
        return cls(proto, host, port, peer_id)

    @classmethod
    def from_socket_address(cls, address: tuple[str, int] | None) -> PeerAddress | None:
        """The address a socket reports (``getpeername()``), if it is an IP address."""
        if not address:
            return None
        try:
            return cls.tcp(str(address[0]), int(address[1]))
        except AddressError:
            return None

    @classmethod
    def of_peer(cls, peer: PeerID, texts: Iterable[str]) -> list[PeerAddress]:
        """The addresses among ``texts`` that parse and name ``peer`` (others are skipped)."""
        found = []
        for text in texts:
            try:
                address = cls.parse(text)
            except AddressError:
                continue
            if address.peer_id == peer:
                found.append(address)
        return found

    @property
    def is_relayed(self) -> bool:
        return self.relay_id is not None

    def with_port(self, port: int) -> PeerAddress:
        _check_port(port, str(self))
        return PeerAddress(self.proto, self.host, port, self.peer_id, self.relay_id)

    def with_peer(self, peer_id: PeerID) -> PeerAddress:
        return PeerAddress(self.proto, self.host, self.port, peer_id, self.relay_id)

    def require_peer(self) -> PeerID:
        if self.peer_id is None:
            raise AddressError(f"address {self} names no PeerID; add /p2p/<PeerID> to dial it")
        return self.peer_id

    def __str__(self) -> str:
        parts = []
        if self.host is not None:
            parts.append(f"/{self.proto}/{self.host}/tcp/{self.port}")
        if self.relay_id is not None:
            parts.append(f"/p2p/{self.relay_id}/p2p-circuit")
        if self.peer_id is not None:
            parts.append(f"/p2p/{self.peer_id}")
        return "".join(parts)


def _proto_of(host: str) -> str:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        if not _HOSTNAME.match(host):
            raise AddressError(f"{host!r} is neither an IP address nor a host name") from None
        return "dns"
    return "ip4" if ip.version == 4 else "ip6"


def _check_port(port: int, context: str) -> None:
    if not 0 <= port <= 65535:
        raise AddressError(f"port {port} out of range in {context!r}")


def _peer(text: str, context: str) -> PeerID:
    try:
        return PeerID.from_string(text)
    except PeerIdError as exc:
        raise AddressError(f"{context!r}: {exc}") from None


def _parse_relay_shorthand(text: str) -> PeerAddress:
    body = text[len("relay:") :]
    relay, sep, target = body.partition("/")
    if not sep or not relay or not target:
        raise AddressError(f"{text!r}: expected relay:<relay PeerID>/<PeerID>")
    return PeerAddress(None, None, None, _peer(target, text), _peer(relay, text))


def _parse_short(text: str) -> PeerAddress:
    location, _, peer_text = text.partition("@")
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([^:\[\]]+):(\d+)", location)
    if match is None:
        raise AddressError(f"{text!r}: expected host:port@PeerID or a /ip4/…/tcp/…/p2p/… address")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    peer = _peer(peer_text, text) if peer_text else None
    address = PeerAddress.tcp(host, port, peer)
    if address.proto == "ip6" and match.group(1) is None:
        raise AddressError(f"{text!r}: write IPv6 hosts in brackets, like [::1]:4001")
    return address


def _parse_multiaddr(text: str) -> PeerAddress:  # noqa: PLR0912 - one branch per component
    parts = text.split("/")[1:]
    proto = host = None
    port: int | None = None
    peers: list[PeerID] = []
    circuit_at: int | None = None
    i = 0
    while i < len(parts):
        name = parts[i]
        if name == "p2p-circuit":
            if circuit_at is not None or not peers:
                raise AddressError(f"{text!r}: /p2p-circuit must follow the relay's /p2p/<PeerID>")
            circuit_at = len(peers)
            i += 1
            continue
        if i + 1 >= len(parts) or not parts[i + 1]:
            raise AddressError(f"{text!r}: /{name} needs a value")
        value = parts[i + 1]
        if name in _PROTOS:
            if proto is not None or peers:
                raise AddressError(f"{text!r}: unexpected /{name} here")
            proto, host = name, value
            actual = _proto_of(value)
            if (name == "ip4" and actual != "ip4") or (name == "ip6" and actual != "ip6"):
                raise AddressError(f"{text!r}: {value!r} is not a valid {name} address")
            if name.startswith("dns") and actual != "dns":
                proto = actual
        elif name == "tcp":
            if host is None or port is not None:
                raise AddressError(f"{text!r}: /tcp must follow exactly one host component")
            if not value.isdigit():
                raise AddressError(f"{text!r}: port {value!r} is not a number")
            port = int(value)
            _check_port(port, text)
        elif name == "p2p":
            peers.append(_peer(value, text))
        else:
            raise AddressError(f"{text!r}: unsupported component /{name}")
        i += 2
    if host is not None and port is None:
        raise AddressError(f"{text!r}: missing /tcp/<port>")
    if circuit_at is not None:
        if len(peers) != 2 or circuit_at != 1:
            raise AddressError(f"{text!r}: expected …/p2p/<relay>/p2p-circuit/p2p/<peer>")
        return PeerAddress(proto, host, port, peers[1], peers[0])
    if len(peers) > 1:
        raise AddressError(f"{text!r}: more than one /p2p/ component without /p2p-circuit")
    if host is None:
        raise AddressError(f"{text!r}: no /ip4, /ip6 or /dns host")
    return PeerAddress(proto, host, port, peers[0] if peers else None)
