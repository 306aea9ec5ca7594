"""TrustedProxies: whose X-Forwarded-For counts, and which entry of it names the client."""

from __future__ import annotations

import logging

import pytest

from core.coordinator.limits.client_address import TrustedProxies, parse_ip
from core.util.errors import ConfigError

PROXIES = TrustedProxies.parse(["127.0.0.1", "10.0.0.0/8", "fd00::/8"])


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        # a stranger's header is ignored entirely
        ("203.0.113.9", ["198.51.100.1"], "203.0.113.9"),
        ("203.0.113.9", [], "203.0.113.9"),
        # from a trusted proxy: the right-most entry that is not a trusted proxy
        ("127.0.0.1", ["198.51.100.1"], "198.51.100.1"),
        ("127.0.0.1", ["1.2.3.4, 5.6.7.8"], "5.6.7.8"),
        ("127.0.0.1", ["1.2.3.4, 5.6.7.8, 10.1.2.3"], "5.6.7.8"),  # a second proxy inside
        ("127.0.0.1", ["1.2.3.4", "5.6.7.8"], "5.6.7.8"),  # two headers read as one list
        ("127.0.0.1", ["not-an-ip, 5.6.7.8"], "5.6.7.8"),  # the client's own junk: never read
        ("127.0.0.1", ["10.0.0.7, 10.0.0.8"], "10.0.0.7"),  # all proxies: the farthest one
        ("127.0.0.1", [], "127.0.0.1"),
        # malformed where it counts: the proxy itself is the client
        ("127.0.0.1", ["5.6.7.8, garbage"], "127.0.0.1"),
        ("127.0.0.1", ["5.6.7.8:4711"], "127.0.0.1"),
        ("127.0.0.1", ["5.6.7.8,"], "127.0.0.1"),
        ("127.0.0.1", ["unknown"], "127.0.0.1"),
        # IPv6, bracketed, IPv4-mapped, zones
        ("fd00::1", ["2001:db8::7"], "2001:db8::7"),
        ("127.0.0.1", ["[2001:db8::7]"], "2001:db8::7"),
        ("::ffff:127.0.0.1", ["::ffff:198.51.100.1"], "198.51.100.1"),
        ("::ffff:203.0.113.9", ["198.51.100.1"], "203.0.113.9"),
        # a peer that is no IP address (a unix socket): as given
        ("", ["198.51.100.1"], ""),
        (None, ["198.51.100.1"], None),
    ],
)
def test_the_client_address(peer: str | None, forwarded: list[str], client: str | None) -> None:
    assert PROXIES.client_address(peer, forwarded) == client


def test_without_trusted_proxies_the_header_never_counts() -> None:
    nobody = TrustedProxies.parse([])
    assert not nobody
    assert nobody.client_address("127.0.0.1", ["198.51.100.1"]) == "127.0.0.1"
    assert nobody.client_address("::ffff:10.0.0.1", ["198.51.100.1"]) == "10.0.0.1"


def test_a_forgotten_trusted_proxy_is_pointed_out_once(caplog: pytest.LogCaptureFixture) -> None:
    nobody = TrustedProxies()
    with caplog.at_level(logging.WARNING, "core.coordinator.limits.client_address"):
        for _ in range(3):
            nobody.client_address("127.0.0.1", ["198.51.100.1"])
        nobody.client_address("203.0.113.9", ["198.51.100.1"])  # a stranger: nothing to say
    assert len(caplog.records) == 1
    assert "pass --trusted-proxy 127.0.0.1" in caplog.records[0].message


def test_a_malformed_header_from_a_proxy_is_logged_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, "core.coordinator.limits.client_address"):
        assert PROXIES.client_address("10.0.0.1", ["x" * 5000]) == "10.0.0.1"
    (record,) = caplog.records
    assert record.levelno == logging.DEBUG
    assert "malformed" in record.message
    assert len(record.message) < 300


def test_bad_networks_are_named_with_what_would_be_right() -> None:
    with pytest.raises(ConfigError, match=r"the network is 10\.0\.0\.0/8 \(or write one address"):
        TrustedProxies.parse(["10.0.0.1/8"])
    with pytest.raises(ConfigError, match=r"'proxy\.lan' is not an IP address or network"):
        TrustedProxies.parse(["proxy.lan"])
    with pytest.raises(ConfigError, match="is every address"):
        TrustedProxies.parse(["::/0"])
    assert TrustedProxies.parse([" 192.0.2.1 "]).trusts(parse_ip("192.0.2.1"))  # type: ignore[arg-type]
