"""A stranger cannot make the swarm's short-lived records live for a day.

Progress records and state announcements are owned: nobody can write another peer's. But a peer's
own record says what it likes about itself, and before, one store claiming a far-off epoch with an
expiration a day ahead made every peer wait for a state nobody had, for that day, whatever happened
to the stranger. Here the stranger runs a DHT node without the swarm's rules (its own client) and
stores such records at the peers' nodes, which now refuse them; within the bound it is one record
among the others, gone minutes after its last store.
"""

from __future__ import annotations

import time

from core.averaging.sharing.state import STATE_TTL, StateSharing
from core.dht import DHTConfig, DHTNode, HostTransport, owner_marker
from core.dht.validation import renewal_bound
from core.training.progress import RECORD_TTL, PeerProgress, ProgressBoard
from tests.conftest import MakeHost
from tests.training.conftest import start_node

DAY = 24 * 3600.0


async def test_a_day_long_progress_record_or_state_offer_is_refused(make_host: MakeHost) -> None:
    host_a, dht_a = await start_node(make_host, None)
    host_b, dht_b = await start_node(make_host, str(host_a.addresses[0]))
    stranger_host = await make_host()
    stranger = DHTNode(HostTransport(stranger_host), DHTConfig(client_mode=True))
    await stranger.start([str(host_a.addresses[0])])
    try:
        board = ProgressBoard(dht_a, "collab")
        ProgressBoard(dht_b, "collab")
        StateSharing(host_a, dht_a, "collab")
        StateSharing(host_b, dht_b, "collab")
        now = time.time()
        honest = PeerProgress(str(host_a.peer_id), 7, 40, 10.0, now)
        assert await board.publish(honest)
        mine = owner_marker(stranger.peer_id)
        far = PeerProgress(str(stranger.peer_id), 1000, 10**6, 1e6, now + DAY)
        assert not await stranger.store("collab.progress", far.to_wire(), now + DAY, subkey=mine)
        offer = [1000, [str(a) for a in stranger_host.addresses]]
        assert not await stranger.store("collab.state", offer, now + DAY, subkey=mine)
        view = board.view(await board.fetch(), honest, 100)
        assert view.epoch == 7
        assert [p.peer for p in view.peers] == [str(host_a.peer_id)]
        # within the bound, it is one peer's word among the others, and lives minutes at most
        soon = now + renewal_bound(RECORD_TTL) - 5
        bounded = PeerProgress(str(stranger.peer_id), 8, 4, 1.0, now)
        assert await stranger.store("collab.progress", bounded.to_wire(), soon, subkey=mine)
        assert {r.peer for r in await board.fetch()} == {str(host_a.peer_id), str(stranger.peer_id)}
        state_soon = now + renewal_bound(STATE_TTL) - 5
        assert await stranger.store("collab.state", offer, state_soon, subkey=mine)
    finally:
        await stranger.close()
        await dht_b.close()
        await dht_a.close()
