"""What the parts of a DHT node share: its identity, settings, tables, stores, rules and counters."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.dht.config import DHTConfig
from core.dht.routing import RoutingTable
from core.dht.storage import RecordStore
from core.dht.transport import DHTTransport
from core.dht.validation import RecordRules
from core.trust.identity import Identity
from core.util.clock import Clock
from core.util.tasks import BackgroundTasks


@dataclass
class DHTStats:
    """Counters since the node started."""

    served: dict[str, int] = field(default_factory=lambda: {"ping": 0, "find": 0, "store": 0})
    sent: dict[str, int] = field(default_factory=lambda: {"ping": 0, "find": 0, "store": 0})
    failed_requests: int = 0
    refused_records: int = 0
    quota_refusals: int = 0
    """Records from others refused (or pushed out at once) for want of room: over their sender's
    quota, into a full key, or into a full store where their sender's network holds the most."""
    garbage_answers: int = 0


@dataclass
class NodeState:
    transport: DHTTransport
    config: DHTConfig
    clock: Clock
    identity: Identity
    node_id: int
    table: RoutingTable
    storage: RecordStore
    cache: RecordStore
    rules: RecordRules
    tasks: BackgroundTasks
    stats: DHTStats = field(default_factory=DHTStats)
