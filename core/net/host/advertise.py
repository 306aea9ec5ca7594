"""Which of our addresses we hand to other peers: only ones that can be true for them.

A Host bound to every interface (``0.0.0.0`` / ``::``) is reachable at each interface address on
that port; it is never reachable, for anyone else, at a loopback, unspecified or link-local address,
so those are never advertised. Loopback addresses are advertised only by a host that listens on
loopback alone (a swarm inside one computer, as in the demo and the tests).

What gets advertised, in this order:

1. public addresses a reachability check confirmed (the address other peers observed us at, dialed
   back from outside; or a router's port mapping, confirmed the same way);
2. the interface addresses the listeners cover (LAN addresses: two volunteers behind one router
   reach each other on them; on a server with a public IP, that public IP);
3. relay addresses (``relay:<relay>/<us>``) while reservations on relays are held.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence

from core.net.host.address import PeerAddress
from core.trust.peer_id import PeerID

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Not in ipaddress's is_private on purpose: Python counts documentation ranges (e.g. 198.51.100.0/24,
# which the NAT lab uses for "the internet") as private; these are the ranges homes really use.
_LAN_NETWORKS = tuple(
    ipaddress.ip_network(net)
    for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)


def parse_ip(text: str) -> IPAddress | None:
    """An IP address (an IPv6 zone like ``%eth0`` dropped), or None for anything else."""
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def is_shareable(ip: IPAddress) -> bool:
    """Whether another computer could ever reach us at ``ip``."""
    return not (ip.is_loopback or ip.is_unspecified or ip.is_link_local or ip.is_multicast)


def is_lan(ip: IPAddress) -> bool:
    """A private (home, office, carrier-grade NAT) address: reachable only from its own network."""
    return any(ip in net for net in _LAN_NETWORKS if net.version == ip.version)


def interface_ips() -> list[str]:
    """Every IP address of this computer's interfaces (psutil works on Windows, macOS, Linux)."""
    import psutil  # noqa: PLC0415 - loaded only by hosts bound to every interface

    found = []
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            if entry.family in (socket.AF_INET, socket.AF_INET6):
                found.append(entry.address.split("%", 1)[0])
    return found


def advertised(
    peer: PeerID,
    bound: Sequence[PeerAddress],
    *,
    interfaces: Callable[[], Iterable[str]] = interface_ips,
    confirmed: Sequence[PeerAddress] = (),
    relays: Sequence[PeerAddress] = (),
) -> list[PeerAddress]:
    """The addresses to give other peers, best first (see the module's docstring)."""
    direct: list[PeerAddress] = []
    loopback: list[PeerAddress] = []
    local_ips: list[IPAddress] | None = None
    for socket_address in bound:
        ip = parse_ip(socket_address.host or "")
        if ip is None or socket_address.port is None:
            continue
        if ip.is_unspecified:
            if local_ips is None:
                local_ips = [a for a in map(parse_ip, interfaces()) if a is not None]
            candidates = [a for a in local_ips if a.version == ip.version]
        else:
            candidates = [ip]
        for candidate in candidates:
            address = PeerAddress.tcp(str(candidate), socket_address.port, peer)
            if is_shareable(candidate):
                direct.append(address)
            elif candidate.is_loopback:
                loopback.append(address)
    # public interface addresses before LAN ones: they work from anywhere
    direct.sort(key=lambda a: is_lan(parse_ip(a.host or "") or ipaddress.ip_address("0.0.0.0")))
    if not confirmed and not direct:  # nothing but loopback: a swarm inside one computer
        direct = loopback
    result: list[PeerAddress] = []
    for given in (*confirmed, *direct, *relays):
        address = given.with_peer(peer)
        if address not in result:
            result.append(address)
    return result
