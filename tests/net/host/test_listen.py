"""Listening: every interface, one stable port, another free port when it is taken."""

from __future__ import annotations

import logging
import socket

import pytest

from core.config.ports import all_interfaces
from core.net import Host, Identity
from core.net.errors import NetError
from tests.conftest import FAST, MakeHost


async def test_a_taken_port_falls_back_to_a_free_one_and_says_so(
    make_host: MakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    first = await make_host()
    port = first.listening_port
    second = Host(Identity.generate(), FAST)
    try:
        with caplog.at_level(logging.WARNING, logger="core.net.host.host"):
            await second.start([f"/ip4/127.0.0.1/tcp/{port}"], port_fallback=True)
        assert second.listening_port not in (None, port)
        assert f"port {port} is taken" in caplog.text
        # and the new port really serves
        await first.connect(second.addresses[0])
    finally:
        await second.close()


async def test_a_listener_with_reuse_port_still_counts_as_taken(make_host: MakeHost) -> None:
    """Our listeners set SO_REUSEPORT (for hole punching); a second Host must not share the port."""
    first = await make_host()
    second = Host(Identity.generate(), FAST)
    try:
        with pytest.raises(NetError, match="taken"):
            await second.start([f"/ip4/127.0.0.1/tcp/{first.listening_port}"])
    finally:
        await second.close()


async def test_all_interfaces_one_port_both_families_and_no_loopback_advertised() -> None:
    host = Host(Identity.generate(), FAST)
    try:
        await host.start(all_interfaces(0))
        bound = {(a.host, a.port) for a in host.listen_addresses}
        port = host.listening_port
        assert ("0.0.0.0", port) in bound
        if socket.has_ipv6:
            assert ("::", port) in bound  # same port on both families
        for address in host.addresses:
            assert address.host not in ("127.0.0.1", "::1", "0.0.0.0", "::")
            assert address.port == port
            assert address.peer_id == host.peer_id
    finally:
        await host.close()


async def test_listen_address_must_be_a_host_and_port() -> None:
    host = Host(Identity.generate(), FAST)
    try:
        with pytest.raises(NetError, match="not a host and port"):
            await host.start([f"relay:{Identity.generate().peer_id}/{host.peer_id}"])
    finally:
        await host.close()
