import pytest

from core.net.errors import AddressError
from core.net.host.address import PeerAddress
from core.trust.identity import Identity

PEER = Identity.generate().peer_id
RELAY = Identity.generate().peer_id


def test_multiaddr_forms() -> None:
    a = PeerAddress.parse(f"/ip4/127.0.0.1/tcp/4001/p2p/{PEER}")
    assert (a.proto, a.host, a.port, a.peer_id, a.is_relayed) == (
        "ip4",
        "127.0.0.1",
        4001,
        PEER,
        False,
    )
    assert str(a) == f"/ip4/127.0.0.1/tcp/4001/p2p/{PEER}"
    b = PeerAddress.parse(f"/ip6/::1/tcp/5/p2p/{PEER}")
    assert (b.proto, b.host) == ("ip6", "::1")
    c = PeerAddress.parse("/dns/backbone.example.org/tcp/31337")
    assert (c.proto, c.host, c.peer_id) == ("dns", "backbone.example.org", None)
    assert PeerAddress.parse(str(c)) == c


def test_short_forms() -> None:
    assert PeerAddress.parse(f"127.0.0.1:4001@{PEER}") == PeerAddress.tcp("127.0.0.1", 4001, PEER)
    v6 = PeerAddress.parse(f"[::1]:4001@{PEER}")
    assert (v6.proto, v6.host) == ("ip6", "::1")
    assert PeerAddress.parse("localhost:80").peer_id is None


def test_relayed_forms() -> None:
    via = PeerAddress.parse(f"/ip4/1.2.3.4/tcp/4001/p2p/{RELAY}/p2p-circuit/p2p/{PEER}")
    assert (via.host, via.relay_id, via.peer_id, via.is_relayed) == ("1.2.3.4", RELAY, PEER, True)
    assert PeerAddress.parse(str(via)) == via
    short = PeerAddress.parse(f"relay:{RELAY}/{PEER}")
    assert (short.host, short.relay_id, short.peer_id) == (None, RELAY, PEER)
    assert PeerAddress.parse(str(short)) == short


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("/ip4/300.1.1.1/tcp/1", "not a valid ip4"),
        ("/ip4/1.2.3.4", "missing /tcp"),
        ("/ip4/1.2.3.4/tcp/99999", "out of range"),
        ("/ip4/1.2.3.4/tcp/x", "not a number"),
        ("/ip4/1.2.3.4/udp/5", "unsupported component"),
        ("/ip4/1.2.3.4/tcp/5/p2p/nope", "invalid PeerID"),
        (f"/p2p/{PEER}/p2p/{PEER}", "more than one"),
        (f"/ip4/1.2.3.4/tcp/1/p2p-circuit/p2p/{PEER}", "must follow the relay"),
        ("relay:abc", "expected relay:"),
        ("1.2.3.4", "expected host:port"),
        (f"::1:4001@{PEER}", "expected host:port"),
        ("bad_host!:80", "neither an IP address nor a host name"),
    ],
)
def test_bad_addresses_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(AddressError, match=message):
        PeerAddress.parse(text)


def test_require_peer() -> None:
    with pytest.raises(AddressError, match="names no PeerID"):
        PeerAddress.parse("/ip4/1.2.3.4/tcp/1").require_peer()
