"""A tiny forward HTTP proxy on 127.0.0.1 for tests: absolute-URI requests and CONNECT tunnels.

It resolves host names itself from ``hosts`` (``{"coordinator.test": "127.0.0.1"}``), names nobody
else can resolve, so a request that reaches such a host provably went through it. Each request is
counted in ``requests`` (``"GET http://coordinator.test:8470/info"``, ``"CONNECT coordinator.test:443"``).
A forwarded plain request is sent on with ``Connection: close``, so each connection carries one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from urllib.parse import urlsplit


class ForwardProxy:
    def __init__(self, hosts: Mapping[str, str]) -> None:
        self.hosts = dict(hosts)
        self.requests: list[str] = []
        self.port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        # closing every socket ends the handlers (a kept-alive tunnel would wait on for ever)
        for writer in list(self._writers):
            writer.close()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        try:
            await self._one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._handlers.discard(task)
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, target, version = request_line.split(" ")
        self.requests.append(f"{method} {target}")
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            upstream_reader, upstream = await self._dial(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        else:
            parts = urlsplit(target)
            assert parts.hostname is not None, target  # a proxy is sent absolute URIs
            upstream_reader, upstream = await self._dial(parts.hostname, parts.port or 80)
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            kept = [
                line
                for line in header_lines
                if line and not line.lower().startswith(("connection:", "proxy-"))
            ]
            upstream.write(
                "\r\n".join(
                    [f"{method} {path} {version}", *kept, "Connection: close", "", ""]
                ).encode("latin-1")
            )
        try:
            await asyncio.gather(_pipe(reader, upstream), _pipe(upstream_reader, writer))
        finally:
            self._writers.discard(upstream)
            upstream.close()

    async def _dial(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(self.hosts.get(host, host), port)
        self._writers.add(writer)
        return reader, writer


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()
    except ConnectionError:
        pass
    finally:
        if sink.can_write_eof():
            with contextlib.suppress(OSError):
                sink.write_eof()
