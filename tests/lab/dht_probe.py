"""Store or get one DHT record from a client-mode node, then leave (run inside a lab namespace).

python -m tests.lab.dht_probe BOOTSTRAP store KEY VALUE
python -m tests.lab.dht_probe BOOTSTRAP get KEY        # prints the value, or "missing"
python -m tests.lab.dht_probe BOOTSTRAP first KEY      # the first copy found, as a trainer reads
"""

from __future__ import annotations

import asyncio
import sys
import time

from core.dht import DHTConfig, DHTNode, HostTransport
from core.net import Host, Identity, NetConfig


async def main(bootstrap: str, op: str, key: str, value: str | None) -> int:
    if op not in ("store", "get", "first"):
        print(f"unknown operation {op!r}: store, get or first", file=sys.stderr)
        return 2
    host = Host(Identity.generate(), NetConfig())
    node = DHTNode(HostTransport(host), DHTConfig(client_mode=True))
    try:
        await host.start([])  # a home computer: nobody can dial it
        await node.start([bootstrap])
        if op == "store":
            ok = await node.store(key, value, time.time() + 600)
            print("stored" if ok else "not stored", flush=True)
            return 0 if ok else 1
        found = await node.get(key, latest=op == "get")
        print("missing" if found is None else found.value, flush=True)
        return 0 if found is not None else 1
    finally:
        await node.close()
        await host.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(asyncio.run(main(args[0], args[1], args[2], args[3] if len(args) > 3 else None)))
