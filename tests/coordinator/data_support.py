"""A coordinator serving a public data folder (``GET /data/<path>``), and raw HTTP requests to it
sent byte for byte, for the data folder's tests and their hostile counterparts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.coordinator import CoordinatorService
from core.net import Identity
from tests.coordinator.conftest import FAST_SCRYPT, make_manifest

SECRET = b"the project key, or anything else outside the folder"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def ask(port: int, target: str, *headers: str, method: str = "GET") -> Answer:
    """One request with ``target`` sent exactly as given; the answer read to the end."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *headers]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    fields = dict(line.split(": ", 1) for line in header_lines)
    return Answer(int(status_line.split()[1]), {k.lower(): v for k, v in fields.items()}, body)


@asynccontextmanager
async def serving_data(tmp_path: Path, folder: Path) -> AsyncIterator[CoordinatorService]:
    """A coordinator on a loopback port serving ``folder``, its database in ``tmp_path/db``."""
    key = Identity.generate()
    (tmp_path / "db").mkdir()
    running = CoordinatorService(
        make_manifest(key), tmp_path / "db" / "c.db", key, scrypt_n=FAST_SCRYPT.n, data_dir=folder
    )
    await running.start("127.0.0.1", 0)
    try:
        yield running
    finally:
        await running.close()
