"""Run a PortMapper inside a lab home (stdlib plus the project; one run per mapping).

    portmap_probe.py METHOD PORT     map PORT by METHOD (natpmp or upnp) with the real defaults:
                                     the default gateway, SSDP multicast

Prints one line, ``{"mapping": {...}}`` or ``{"mapping": null, "reason": "..."}``, then holds the
mapping until SIGTERM, closes the mapper (deleting the mapping) and prints ``closed``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.net.reach.portmap import PortMapper  # after the path that finds it


async def main(method: str, port: int) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    mapper = PortMapper(port, methods=(method,), lease_s=600)  # type: ignore[arg-type]
    mapping = await mapper.start()
    line = {"mapping": dataclasses.asdict(mapping) if mapping else None}
    if mapping is None:
        line["reason"] = mapper.last_reason  # type: ignore[assignment]
    print(json.dumps(line), flush=True)
    await stop.wait()
    await mapper.close()
    print("closed", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
