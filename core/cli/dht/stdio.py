"""JSON-line commands for a ``barnraise dht`` node (scripts and benchmarks; POSIX only).

Each input line is one command; each answer is one line with the same ``id``, in completion order
(commands run concurrently):

    {"id": 1, "op": "store", "key": "k", "value": "v", "expiration": 1700000000.0, "subkey": null}
    {"id": 2, "op": "get", "key": "k", "latest": false}
    {"id": 3, "op": "stats"}

answers: ``{"id": 1, "ok": true, "result": ...}`` or ``{"id": 1, "ok": false, "error": "..."}``. A ``get``
result is null or ``{"value": ..., "expiration": ...}`` (dictionary values map subkeys to the same shape).
End of input stops the node.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from typing import Any

from core.dht import DHTNode, ValueWithExpiration
from core.util.errors import BarnraiseError, ConfigError
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)


def _plain(value: ValueWithExpiration | None) -> Any:
    if value is None:
        return None
    inner = value.value
    if isinstance(inner, dict) and all(isinstance(v, ValueWithExpiration) for v in inner.values()):
        inner = {str(k): _plain(v) for k, v in inner.items()}
    return {"value": inner, "expiration": value.expiration}


async def _execute(node: DHTNode, command: dict[str, Any]) -> Any:
    op = command.get("op")
    if op == "store":
        return await node.store(
            command["key"], command["value"], float(command["expiration"]), command.get("subkey")
        )
    if op == "get":
        return _plain(await node.get(command["key"], latest=bool(command.get("latest", False))))
    if op == "stats":
        return node.stats_snapshot()
    raise ConfigError(f"unknown op {op!r} (expected store, get or stats)")


async def serve_stdio(node: DHTNode, stop: asyncio.Event) -> None:
    if os.name != "posix":
        raise ConfigError("--stdio-api needs a POSIX system")
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=16 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks = BackgroundTasks("dht-stdio")

    def answer(reply: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(reply, default=str) + "\n")
        sys.stdout.flush()

    async def handle(line: bytes) -> None:
        try:
            command = json.loads(line)
            reply_id = command.get("id")
        except (ValueError, AttributeError) as exc:
            answer({"id": None, "ok": False, "error": f"not a JSON object: {exc}"})
            return
        try:
            answer({"id": reply_id, "ok": True, "result": await _execute(node, command)})
        except (BarnraiseError, KeyError, TypeError, ValueError) as exc:
            answer({"id": reply_id, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        except (
            Exception
        ) as exc:  # a bug: still answer, or the script on the other end waits forever
            log.exception("command %r failed", command.get("op"))
            answer(
                {
                    "id": reply_id,
                    "ok": False,
                    "error": f"internal error: {type(exc).__name__}: {exc}",
                }
            )

    reading = asyncio.ensure_future(reader.readline())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while True:
            done, _ = await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if stopping in done:
                return
            line = reading.result()
            if not line:
                return
            if line.strip():
                tasks.spawn("command", handle(line))
            reading = asyncio.ensure_future(reader.readline())
    finally:
        reading.cancel()
        stopping.cancel()
        await tasks.close()
