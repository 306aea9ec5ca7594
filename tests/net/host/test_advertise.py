"""Which addresses a Host hands to others (core.net.host.advertise): never loopback or link-local."""

from __future__ import annotations

from core.net import Identity, PeerAddress
from core.net.host.advertise import advertised, is_lan, is_shareable, parse_ip

ME = Identity.generate().peer_id
RELAY = Identity.generate().peer_id
INTERFACES = ["127.0.0.1", "::1", "192.168.1.20", "fe80::1", "fd00::5", "203.0.113.9"]


def texts(addresses: list[PeerAddress]) -> list[str]:
    return [f"{a.host}:{a.port}" if not a.is_relayed else f"relay:{a.relay_id}" for a in addresses]


def test_wildcard_expands_to_shareable_interfaces_public_first() -> None:
    got = advertised(
        ME,
        [PeerAddress.tcp("0.0.0.0", 4001), PeerAddress.tcp("::", 4001)],
        interfaces=lambda: INTERFACES,
    )
    assert texts(got) == ["203.0.113.9:4001", "192.168.1.20:4001", "fd00::5:4001"]
    assert all(a.peer_id == ME for a in got)


def test_loopback_only_host_advertises_loopback() -> None:
    got = advertised(ME, [PeerAddress.tcp("127.0.0.1", 5000)], interfaces=lambda: INTERFACES)
    assert texts(got) == ["127.0.0.1:5000"]


def test_wildcard_on_a_computer_with_only_loopback_falls_back_to_it() -> None:
    got = advertised(
        ME, [PeerAddress.tcp("0.0.0.0", 4001)], interfaces=lambda: ["127.0.0.1", "::1"]
    )
    assert texts(got) == ["127.0.0.1:4001"]


def test_confirmed_first_relays_last_and_no_loopback_beside_them() -> None:
    confirmed = [PeerAddress.tcp("198.51.100.11", 4001)]
    relayed = [PeerAddress.parse(f"relay:{RELAY}/{ME}")]
    got = advertised(
        ME,
        [PeerAddress.tcp("127.0.0.1", 4001)],
        interfaces=lambda: INTERFACES,
        confirmed=confirmed,
        relays=relayed,
    )
    assert texts(got) == ["198.51.100.11:4001", f"relay:{RELAY}"]


def test_a_private_peer_that_listens_nowhere_advertises_only_relays() -> None:
    relayed = [PeerAddress.parse(f"relay:{RELAY}/{ME}")]
    assert texts(advertised(ME, [], interfaces=lambda: INTERFACES, relays=relayed)) == [
        f"relay:{RELAY}"
    ]
    assert advertised(ME, [], interfaces=lambda: INTERFACES) == []


def test_address_classes() -> None:
    def ip(text: str):  # type: ignore[no-untyped-def]
        parsed = parse_ip(text)
        assert parsed is not None
        return parsed

    assert not is_shareable(ip("127.0.0.1"))
    assert not is_shareable(ip("0.0.0.0"))
    assert not is_shareable(ip("fe80::1%eth0"))
    assert not is_shareable(ip("169.254.3.4"))
    assert is_shareable(ip("10.0.0.2"))
    for lan in ("10.0.0.2", "100.64.1.1", "fd00::1", "192.168.0.3", "172.16.9.9"):
        assert is_lan(ip(lan)), lan
    # documentation ranges (the NAT lab's "internet") are not LAN addresses for us
    assert not is_lan(ip("198.51.100.10"))
    assert parse_ip("example.org") is None
