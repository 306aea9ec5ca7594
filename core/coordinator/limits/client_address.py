"""The client's address for the rate limits: the TCP peer, or what a trusted reverse proxy forwards.

Behind a reverse proxy (nginx, Caddy, a cloud load balancer) every connection comes from the proxy,
so the login and sign-up limits would count the whole world as one address and slow everyone at
once. The proxy names the client it served in ``X-Forwarded-For``, appending to what the client sent
(``client, proxy1, proxy2``). Anyone can send that header, though: a stranger free to choose the
address the limits see would dodge them by changing it on every guess. So the header counts only
when the TCP peer lies in a network the organizer named (``--trusted-proxy``), and it is read from
the right: each trusted proxy appended the address it received from, so the right-most entry that
is not itself a trusted proxy is the client; what stands left of it was written by the client and is
ignored. A malformed entry at that point (no IP address, a port) makes the peer itself the client.

Addresses come back as ``ipaddress`` writes them (an IPv4-mapped IPv6 peer as its IPv4 address);
``addresses.address_prefix`` then groups them for counting.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Sequence

from core.util.errors import ConfigError

log = logging.getLogger(__name__)

FORWARDED_FOR = "X-Forwarded-For"

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_ip(text: str) -> IpAddress | None:
    """``text`` as an IP address (a bracketed IPv6 one too, an IPv4-mapped one as IPv4), or None."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 zone (fe80::1%eth0) is local
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


class TrustedProxies:
    """The networks whose connections may name their client in ``X-Forwarded-For``."""

    def __init__(self, networks: Sequence[IpNetwork] = ()) -> None:
        self.networks = tuple(networks)
        self._hinted = False

    @classmethod
    def parse(cls, texts: Iterable[str]) -> TrustedProxies:
        """From CIDR texts (``10.0.0.0/8``, ``127.0.0.1``, ``fd00::/8``); ``ConfigError`` names a
        bad one and what would be right."""
        networks: list[IpNetwork] = []
        for text in texts:
            try:
                network = ipaddress.ip_network(text.strip(), strict=True)
            except ValueError as exc:
                raise ConfigError(_bad_network(text, exc)) from None
            if network.prefixlen == 0:
                raise ConfigError(
                    f"trusted proxy {text!r} is every address: anyone could then write the address "
                    "the rate limits count; name only the reverse proxy's own address or network"
                )
            networks.append(network)
        return cls(networks)

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, ip: IpAddress) -> bool:
        return any(ip in network for network in self.networks)

    def client_address(self, peer: str | None, forwarded: Sequence[str]) -> str | None:
        """The address to count a request under: ``peer`` (the TCP peer, as aiohttp's
        ``request.remote`` gives it) unless it is a trusted proxy, then the right-most entry of
        the ``X-Forwarded-For`` headers (``forwarded``, each a comma-separated list, in the
        order received) that is not a trusted proxy."""
        peer_ip = parse_ip(peer) if peer else None
        if peer_ip is None:
            return peer
        if not self.trusts(peer_ip):
            if forwarded and not self.networks:
                self._hint(peer_ip)
            return str(peer_ip)
        entries = [entry for header in forwarded for entry in header.split(",")]
        client = peer_ip
        for entry in reversed(entries):
            ip = parse_ip(entry)
            if ip is None:
                log.debug(
                    "proxy %s forwarded a malformed %s entry %r: counting the request as the "
                    "proxy's",
                    peer_ip,
                    FORWARDED_FOR,
                    entry[:100],
                )
                return str(peer_ip)
            client = ip
            if not self.trusts(ip):
                break
        return str(client)

    def _hint(self, peer: IpAddress) -> None:
        """Once: requests from this computer that carry the header are likely from a proxy the
        organizer forgot to name, which would make every volunteer one address to the limits."""
        if self._hinted or not peer.is_loopback:
            return
        self._hinted = True
        log.warning(
            "requests from %s carry %s, as a reverse proxy's do, but no --trusted-proxy is set: "
            "the header is ignored and the rate limits count every client as %s; if a proxy "
            "forwards to this coordinator, pass --trusted-proxy %s",
            peer,
            FORWARDED_FOR,
            peer,
            peer,
        )


def _bad_network(text: str, exc: ValueError) -> str:
    message = f"trusted proxy {text!r} is not an IP address or network (CIDR, e.g. 10.0.0.0/8)"
    if "host bits set" in str(exc):
        try:
            suggested = ipaddress.ip_network(text.strip(), strict=False)
        except ValueError:
            return message
        return (
            f"trusted proxy {text!r} has bits set past its prefix; the network is {suggested} "
            f"(or write one address alone, as {text.split('/', 1)[0].strip()})"
        )
    return message
