"""The addresses two peers trade before a hole punch: which of ours we offer, which of theirs we dial.

An offer has two lists. ``public`` holds addresses anyone could reach us at if our NAT lets them
in: the IPs other peers observed us at, each with our listening port (a NAT that preserves ports
maps the punching socket, bound to that port, to the same public port), the observed address
exactly as reported, and confirmed public addresses. ``lan`` holds our interface addresses that
mean something only near us (home network; loopback for a swarm inside one computer).

The receiver refuses an offer it cannot trust as a whole (a non-IP, a port out of range, too many
entries, a private or loopback address posing as public, loopback from a peer that is not on this
computer) and then dials the public list, plus the LAN list only when both peers share a public IP
(one router: the LAN addresses are each other's; otherwise a private address may be some other
computer in our own home). The sender cannot know in advance whether it shares a network with the
receiver, so LAN entries from afar are skipped rather than refused.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from core.net.errors import InvalidRequestError
from core.net.host.address import PeerAddress
from core.net.host.advertise import IPAddress, is_lan, is_shareable, parse_ip
from core.net.wire.connection import Connection
from core.util.wire import WireMessage

MAX_CANDIDATES = 8
"""Entries per list: a home has a handful of addresses; more is a request to scan someone."""

Candidate = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PunchOffer(WireMessage):
    """One side's addresses for a punch (``attempt`` numbers the round, from 1)."""

    attempt: int
    public: list[Candidate] = field(default_factory=list)
    lan: list[Candidate] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Whereabouts:
    """What we know of our own network position, to build our offer and judge theirs."""

    port: int
    """Our listening port: the punching sockets bind it."""
    observed: list[Candidate]
    """Addresses other peers saw our direct connections come from."""
    confirmed: list[Candidate]
    """Public addresses a reachability check proved."""
    interfaces: list[Candidate]
    """Our own listening addresses, as we advertise them (interface IPs)."""
    loopback_only: bool
    """We listen on loopback alone: a swarm inside one computer (demos, tests)."""

    @property
    def public_ips(self) -> set[str]:
        return {ip for ip, _ in (*self.observed, *self.confirmed)}


def observed_addresses(connections: Iterable[Connection]) -> list[Candidate]:
    """The addresses our direct peers told us (in their hello) they see us at."""
    found: list[Candidate] = []
    for conn in connections:
        hello = conn.remote_hello
        if conn.relayed_via is not None or hello is None or not hello.observed:
            continue  # a relay's circuit hides our address: its peer observes nothing
        parsed = _parse_observed(hello.observed)
        if parsed is not None and parsed not in found:
            found.append(parsed)
    return found


def _parse_observed(text: str) -> Candidate | None:
    try:
        address = PeerAddress.parse(text)
    except ValueError:
        return None
    if address.host is None or address.port is None or parse_ip(address.host) is None:
        return None
    return address.host, address.port


def make_offer(where: Whereabouts, attempt: int) -> PunchOffer:
    """Our addresses for round ``attempt``, most likely first, each list cut to the limit."""
    public: list[Candidate] = []
    lan: list[Candidate] = []

    def add(target: list[Candidate], candidate: Candidate) -> None:
        if candidate not in target and len(target) < MAX_CANDIDATES:
            target.append(candidate)

    for host, _ in where.observed:  # the listening port's mapping on a port-preserving NAT
        if _is_public(parse_ip(host)):
            add(public, (host, where.port))
    for candidate in where.confirmed:
        if _is_public(parse_ip(candidate[0])):
            add(public, candidate)
    for candidate in where.interfaces:
        ip = parse_ip(candidate[0])
        if _is_public(ip):
            add(public, candidate)  # a computer with a public IP of its own
        elif ip is not None and (is_lan(ip) or (ip.is_loopback and where.loopback_only)):
            add(lan, candidate)
    for candidate in where.observed:  # as reported: right for a NAT that keeps an outbound mapping
        if _is_public(parse_ip(candidate[0])):
            add(public, candidate)
    return PunchOffer(attempt, public, lan)


def _is_public(ip: IPAddress | None) -> bool:
    return ip is not None and is_shareable(ip) and not is_lan(ip)


def dial_targets(offer: PunchOffer, where: Whereabouts) -> list[Candidate]:
    """The addresses of ``offer`` we should dial; ``InvalidRequestError`` naming what is wrong."""
    if not 1 <= offer.attempt <= 100:
        raise InvalidRequestError(f"attempt {offer.attempt} is out of range")
    for name, entries in (("public", offer.public), ("lan", offer.lan)):
        if len(entries) > MAX_CANDIDATES:
            raise InvalidRequestError(
                f"{len(entries)} {name} candidates; at most {MAX_CANDIDATES} are accepted"
            )
    public = [_checked(c, "public") for c in offer.public]
    for ip, candidate in zip(public, offer.public, strict=True):
        if not _is_public(ip):
            raise InvalidRequestError(f"{show_candidate(candidate)} is not a public address")
    nearby = [_checked(c, "lan") for c in offer.lan]
    for ip, candidate in zip(nearby, offer.lan, strict=True):
        if ip.is_loopback:
            if not where.loopback_only:
                raise InvalidRequestError(
                    f"{show_candidate(candidate)} is a loopback address, and we are on another computer"
                )
        elif not is_lan(ip):
            raise InvalidRequestError(f"{show_candidate(candidate)} is not a LAN address")
    targets = list(dict.fromkeys(offer.public))
    same_network = where.loopback_only or bool(where.public_ips & {ip for ip, _ in offer.public})
    if same_network:
        targets += [c for c in dict.fromkeys(offer.lan) if c not in targets]
    return targets


def _checked(candidate: Sequence[object], kind: str) -> IPAddress:
    host, port = candidate
    if not isinstance(host, str) or not isinstance(port, int):
        raise InvalidRequestError(f"a {kind} candidate is not a (host, port) pair")
    ip = parse_ip(host)
    if ip is None or "%" in host:
        raise InvalidRequestError(f"{host!r} is not an IP address")
    if not 1 <= port <= 65535:
        raise InvalidRequestError(f"port {port} of {host} is out of range")
    return ip


def show_candidate(candidate: Candidate) -> str:
    host, port = candidate
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def candidates_of(addresses: list[PeerAddress]) -> list[Candidate]:
    """The direct IP addresses among ``addresses``, as candidates."""
    return [
        (a.host, a.port)
        for a in addresses
        if not a.is_relayed and a.host is not None and a.port is not None and parse_ip(a.host)
    ]


def candidate_of_peername(peername: object) -> Candidate | None:
    """A socket's ``peername`` as a candidate (IPv4-mapped IPv6 shown as IPv4), if it is one."""
    if not isinstance(peername, tuple) or len(peername) < 2:
        return None
    ip = parse_ip(str(peername[0]))
    if ip is None:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # a dual-stack listener shows IPv4 peers this way
    return str(ip), int(peername[1])
