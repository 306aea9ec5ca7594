"""Default listening ports, one per role, so that organizers and routers can name them.

A stable port matters beyond convenience: a port forward (by hand, UPnP or NAT-PMP) and a
reachability check both name a port, and a peer that listens somewhere new every run loses both.
When the default is taken (a second peer on one computer) the Host takes any free port and says so.
"""

from __future__ import annotations

from types import MappingProxyType

PEER_PORT = 4001
"""A volunteer's trainer (CLI ``peer`` and the desktop engine's peer)."""
BACKBONE_PORT = 4002
"""The backbone (CLI ``backbone``)."""
DHT_PORT = 4003
"""A bare DHT node (``barnraise dht``), e.g. a bootstrap peer."""

DEFAULT_PORTS = MappingProxyType({"peer": PEER_PORT, "backbone": BACKBONE_PORT, "dht": DHT_PORT})
"""Read-only: role name to default port."""

ALL_INTERFACES = ("/ip4/0.0.0.0/tcp/{port}", "/ip6/::/tcp/{port}")
"""What a peer on the internet listens on: every interface, IPv4 and IPv6, one port."""


def all_interfaces(port: int) -> list[str]:
    """The listen addresses for every interface (both families) on ``port``."""
    return [template.format(port=port) for template in ALL_INTERFACES]


def listen_on(host: str | None, port: int) -> list[str]:
    """Listen addresses for ``--host``/``--port``: every interface when ``host`` is None or a
    wildcard (``0.0.0.0`` and ``::`` both mean both families), else that one address."""
    if host in (None, "", "0.0.0.0", "::", "*"):
        return all_interfaces(port)
    assert host is not None
    return [f"/ip6/{host}/tcp/{port}" if ":" in host else f"/ip4/{host}/tcp/{port}"]
