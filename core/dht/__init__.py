"""The Kademlia DHT: the swarm's shared notebook of expiring, optionally owned records.

- ``ids``          160-bit node and key ids, XOR distance.
- ``routing``      RoutingTable: k-buckets that split, replacement caches.
- ``records``      StoredValue, ValueWithExpiration, owner markers and the signed payload.
- ``quotas``       Source (peer and network of a store), Quotas, Tally: who holds how much.
- ``storage``      RecordStore: expiry, newer-wins, dictionaries merged per subkey, a byte budget,
                   quotas per source; when full, the largest holder gives way.
- ``validation``   RecordRules (sizes, expirations, owner signatures) and RecordSchema.
- ``messages``     the ping / find / store wire messages and their size limits.
- ``transport``    DHTTransport, and HostTransport over real connections.
- ``memory``       MemoryNetwork: thousands of nodes in one process, for simulations and tests.
- ``traversal``    iterative alpha-parallel lookups, batched across keys, with hop counts.
- ``state``        NodeState: what a node's parts share; DHTStats.
- ``contacts``     ContactBook: who enters and leaves the routing table.
- ``maintenance``  Penalties: eviction of silent contacts, bans for nodes that answer garbage.
- ``lookups``      Lookups: seeding, requesting and validating for the traversal.
- ``replication``  Replicator: copies on the nearest nodes, caching along the lookup path.
- ``serving``      RequestServer: answering ping, find and store.
- ``merging``      combining copies of a record by the storage rules.
- ``batching``     Coalescer: concurrent calls served by one shared traversal.
- ``node``         DHTNode: store/get and batched forms, bootstrap, republish, refresh.
- ``config``       DHTConfig.

Nothing here imports torch.
"""

from core.dht.config import DHTConfig
from core.dht.node import DHTError, DHTNode
from core.dht.records import InvalidRecord, ValueWithExpiration, owner_marker
from core.dht.transport import HostTransport
from core.dht.validation import RecordSchema

__all__ = [
    "DHTConfig",
    "DHTError",
    "DHTNode",
    "HostTransport",
    "InvalidRecord",
    "RecordSchema",
    "ValueWithExpiration",
    "owner_marker",
]
