"""The address prefix a client is counted under by the rate limits, not its exact address.

One person easily holds many addresses: a home's IPv6 prefix has 2^64 or more, and every 127.x.y.z
reaches a loopback service. So limits count per prefix: IPv4 per /24 (all of 127/8 as one), IPv6
per /56 (what ISPs commonly give one home; a /64 would let each household use 256 of them), and an
IPv4-mapped IPv6 address (``::ffff:a.b.c.d``, from a dual-stack socket) as the IPv4 address it
carries. Anything that is not an IP address (a unix socket, a missing peer name) is one prefix.
"""

from __future__ import annotations

import ipaddress

IPV4_PREFIX = 24
IPV6_PREFIX = 56
UNKNOWN = "unknown"


def address_prefix(address: str | None) -> str:
    """The network ``address`` is counted under, as text (``"192.0.2.0/24"``)."""
    if not address:
        return UNKNOWN
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone (fe80::1%eth0)
    except ValueError:
        return UNKNOWN
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv4Address):
        bits = 8 if ip.is_loopback else IPV4_PREFIX
        return str(ipaddress.IPv4Network((ip, bits), strict=False))
    return str(ipaddress.IPv6Network((ip, IPV6_PREFIX), strict=False))
