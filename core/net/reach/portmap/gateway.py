"""Finding the home router: the default gateway (for NAT-PMP) and our address facing it (for UPnP).

Neither needs a helper program or a platform API. The address facing a host is what the kernel picks
as the source of a UDP socket ``connect``ed to it (a connect sends nothing). The default gateway's
address is read from ``/proc/net/route`` on Linux; Windows and macOS expose it only through system
APIs or tools (``route``, ``netstat``), so there NAT-PMP needs the gateway given, and UPnP (which finds
the router by multicast) is the method that works everywhere.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from pathlib import Path

_RTF_GATEWAY = 0x2


def default_gateway_ipv4(route_table: Path = Path("/proc/net/route")) -> str | None:
    """The IPv4 default gateway from the Linux routing table, or None when there is none or no table."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        lines = route_table.read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) < 4:
            continue
        destination, gateway, flags = fields[1], fields[2], fields[3]
        try:
            if int(destination, 16) != 0 or not int(flags, 16) & _RTF_GATEWAY:
                continue
            # the kernel prints the address as a host-order (little-endian on x86/ARM) 32-bit hex word
            packed = int(gateway, 16).to_bytes(4, sys.byteorder)
        except ValueError:
            continue
        return str(ipaddress.IPv4Address(packed))
    return None


def local_address_towards(host: str) -> str:
    """Our own IPv4 address on the interface that routes to ``host`` (raises OSError if none does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((host, 9))  # any port: a UDP connect only chooses the route, it sends nothing
        address: str = sock.getsockname()[0]
    return address
