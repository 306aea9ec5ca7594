"""Port mapping on home routers: asking a UPnP-IGD or NAT-PMP router to forward our listening port.

A volunteer behind a home router cannot be dialed. Where the router offers UPnP-IGD or NAT-PMP (or
PCP, which answers NAT-PMP), the peer asks it to forward its TCP port, so that others can dial it
directly instead of through a relay. What this does not do:

- It does not help behind carrier-grade NAT (many mobile and some fibre/cable ISPs) or behind a
  second router: the home router then maps the port on an address that is itself private. The
  external address it reports says so only sometimes (a 100.64/10 or 10/8 address).
- A granted mapping is a claim, not a proof: firewalls, ISPs and buggy routers can still drop
  incoming connections. The address is announced only after a dial-back from a public peer (the
  reachability check) has confirmed it; this package only asks the router.
- It maps one IPv4 port; IPv6 hosts are normally reachable without mapping (or need a firewall
  pinhole, which this does not open).

- ``mapper``   PortMapper: search both ways at once, map, renew at half the lease, delete on close.
- ``natpmp``   NatPmpClient: RFC 6886 over asyncio UDP (our own: two tiny messages, no good library).
- ``upnp``     UpnpIgdClient: SSDP search and WANIPConnection/WANPPPConnection SOAP calls, through
  ``async-upnp-client``.
- ``gateway``  the default gateway (Linux) and our address facing the router, without helper programs.
- ``mapping``  Mapping (what the router granted) and PortMapError (why not).
"""

from core.net.reach.portmap.mapper import PortMapper
from core.net.reach.portmap.mapping import Mapping, Method, PortMapError

__all__ = ["Mapping", "Method", "PortMapError", "PortMapper"]
