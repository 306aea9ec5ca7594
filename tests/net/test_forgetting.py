"""Tables keyed by peer that a long-running engine must not let grow with every peer it meets."""

from __future__ import annotations

from core.net import Host, Identity
from core.net.reach.monitor import MAX_ASKED, ReachabilityMonitor
from core.net.relay.client import RETRY_MAX, RelayClient
from core.net.relay.dialer import RelayDialer
from core.trust.peer_id import PeerID
from core.util.clock import FakeClock

SOMEONE = Identity.generate().peer_id


def stranger(n: int) -> PeerID:
    """A well-formed PeerID without a key behind it (nothing here checks one)."""
    return PeerID(SOMEONE.to_bytes()[:-4] + n.to_bytes(4, "big"))


async def test_a_relay_client_forgets_candidates_it_stopped_trying() -> None:
    """Every peer we dial directly is asked to relay; those met once are not kept for weeks."""
    clock = FakeClock(monotonic_start=1000.0)
    client = RelayClient(Host(Identity.generate()), clock=clock)
    for n in range(10_000):
        client._failed(stranger(n))
        if n % 50 == 0:
            client._failed(SOMEONE)  # a relay that keeps refusing: its backoff keeps growing
        clock.advance(1.0)
        assert len(client._backoff) <= 3 * RETRY_MAX + 2
    assert stranger(9_999) in client._backoff
    assert client._backoff[SOMEONE].failures == 200


def test_the_reachability_monitor_remembers_a_bounded_number_of_asked_peers() -> None:
    clock = FakeClock(monotonic_start=1000.0)
    monitor = ReachabilityMonitor(Host(Identity.generate()), clock=clock)
    for n in range(10_000):
        monitor._note_asked(str(stranger(n)))
        clock.advance(1.0)
        assert len(monitor._asked) <= MAX_ASKED
    assert str(stranger(9_999)) in monitor._asked
    assert str(stranger(0)) not in monitor._asked


async def test_relay_clients_made_and_closed_again_and_again_leave_no_listener_behind() -> None:
    """Presence makes a new relay client (sharing its dialer) each time reachability leaves
    PUBLIC, as on a laptop that changes networks daily: a closed one must not stay attached."""
    host = Host(Identity.generate())
    dialer = RelayDialer(host)
    before = len(host._connection_listeners)
    for _ in range(1_000):
        client = RelayClient(host, dialer=dialer)
        client.start()
        await client.close()
    assert len(host._connection_listeners) == before
