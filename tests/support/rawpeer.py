"""A hand-driven TLS client that can say anything, to test how a Host treats bad input."""

from __future__ import annotations

import asyncio
import contextlib

from core.net import Host, Identity
from core.net.config import MiB
from core.net.host.certificate import issue_credentials
from core.net.host.tls import SERVER_NAME, client_context
from core.net.wire.frames import Kind, encode_frame
from core.net.wire.hello import PROTOCOL_VERSION, Hello
from core.util.msgpack_codec import pack


async def connect_tls(
    host: Host, identity: Identity | None = None, *, proof: bytes | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a TLS connection to ``host`` with a valid (or, with ``proof``, forged) certificate."""
    credentials = issue_credentials(identity or Identity.generate(), proof=proof)
    address = host.addresses[0]
    assert address.host is not None
    assert address.port is not None
    return await asyncio.open_connection(
        address.host, address.port, ssl=client_context(credentials), server_hostname=SERVER_NAME
    )


def hello_frame(protocol: int = PROTOCOL_VERSION, window: int = 16 * MiB) -> bytes:
    return encode_frame(Kind.HELLO, 0, pack(Hello(protocol, "raw-test", window).to_wire()))


async def read_until_closed(reader: asyncio.StreamReader, timeout: float = 5.0) -> bytes:
    """Everything the host sends until it closes the connection (raises TimeoutError if it never does)."""
    received = bytearray()
    async with asyncio.timeout(timeout):
        while True:
            try:
                chunk = await reader.read(65536)
            except (ConnectionError, OSError):
                break
            if not chunk:
                break
            received += chunk
    return bytes(received)


async def close_writer(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
