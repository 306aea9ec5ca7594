"""A small HTTP server for data shards on 127.0.0.1: local swarms, demos and tests.

``ShardServer`` serves the files of one directory with GET, HEAD and single byte-range requests,
which is what fsspec's HTTP filesystem (used by `datasets` for streaming) needs to read a shard
piece by piece. It counts the body bytes it has handed to sockets, so a test can tell whether a
reader streamed a shard or fetched all of it.

``datasets`` reads synchronously in the thread that iterates, so a server on that same thread's event
loop would never get to answer. ``ShardServerThread`` therefore runs a ``ShardServer`` on an event
loop of its own in a dedicated thread: the one place in ``core.data`` where a thread owns a loop.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from aiohttp import hdrs, web

from core.data.errors import DataError

_CHUNK = 256 * 1024  # bytes per socket write: small enough that an abandoned read costs little
_SHUTDOWN_GRACE = 1.0  # seconds a closing server waits for in-flight responses


class ShardServer:
    """Serves the files under ``directory`` over HTTP on 127.0.0.1 (asyncio, one event loop)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory).resolve()
        self._runner: web.AppRunner | None = None
        self._url: str | None = None
        self._bytes_sent = 0

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:PORT/``; a file's URL is this plus its relative path."""
        if self._url is None:
            raise RuntimeError("the shard server is not started")
        return self._url

    @property
    def bytes_sent(self) -> int:
        """Body bytes handed to client connections so far (headers and HEAD answers not counted)."""
        return self._bytes_sent

    async def start(self, port: int = 0) -> str:
        """Listen on 127.0.0.1 (``port`` 0: any free port) and return the base URL."""
        if self._runner is not None:
            raise RuntimeError("the shard server is already started")
        if not self.directory.is_dir():
            raise DataError(f"cannot serve {self.directory}: not a directory")
        app = web.Application()
        app.router.add_get("/{path:.*}", self._serve)  # also answers HEAD
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=_SHUTDOWN_GRACE)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", port)
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise DataError(f"cannot serve shards on 127.0.0.1:{port}: {exc}") from exc
        self._runner = runner
        bound_port = runner.addresses[0][1]
        self._url = f"http://127.0.0.1:{bound_port}/"
        return self._url

    async def close(self) -> None:
        """Stop listening and close every connection. Safe to call more than once."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        opened = await asyncio.to_thread(self._open, request.match_info["path"])
        if opened is None:
            raise web.HTTPNotFound()
        file, size = opened
        try:
            start, stop = self._byte_range(request, size)
            partial = hdrs.RANGE in request.headers
            response = web.StreamResponse(status=206 if partial else 200)
            response.content_type = "application/octet-stream"
            response.content_length = stop - start
            response.headers[hdrs.ACCEPT_RANGES] = "bytes"
            if partial:
                response.headers[hdrs.CONTENT_RANGE] = f"bytes {start}-{stop - 1}/{size}"
            await response.prepare(request)
            if request.method != hdrs.METH_HEAD:
                await self._send_body(file, start, stop, response)
            return response
        finally:
            file.close()

    def _open(self, relative: str) -> tuple[BinaryIO, int] | None:
        """Open a served file (blocking: runs in a worker thread); None if it is not ours."""
        path = (self.directory / relative).resolve()
        # resolve() follows "..", and symlinks, so this also refuses links pointing out of the root.
        if not path.is_relative_to(self.directory) or not path.is_file():
            return None
        try:
            file = path.open("rb")
        except OSError:
            return None
        return file, path.stat().st_size

    @staticmethod
    def _byte_range(request: web.Request, size: int) -> tuple[int, int]:
        """The requested ``[start, stop)``; the whole file when no Range header is sent."""
        unsatisfiable = web.HTTPRequestRangeNotSatisfiable(
            headers={hdrs.CONTENT_RANGE: f"bytes */{size}"}
        )
        try:
            wanted = request.http_range
        except ValueError:
            raise unsatisfiable from None
        if hdrs.RANGE not in request.headers:
            return 0, size
        if wanted.start is not None and wanted.start >= size:
            raise unsatisfiable
        start, stop, _ = wanted.indices(size)
        if start >= stop:
            raise unsatisfiable
        return start, stop

    async def _send_body(
        self, file: BinaryIO, start: int, stop: int, response: web.StreamResponse
    ) -> None:
        await asyncio.to_thread(file.seek, start)
        remaining = stop - start
        while remaining > 0:
            chunk = await asyncio.to_thread(file.read, min(_CHUNK, remaining))
            if not chunk:  # the file shrank while we were sending it
                break
            # Counted before the write: the client can have the bytes before write() returns, and a
            # count that runs ahead (by one chunk, for a client that hung up) errs on the safe side.
            self._bytes_sent += len(chunk)
            try:
                await response.write(chunk)
            except ConnectionError:
                # Readers often stop early (fsspec probes files with a GET and hangs up); not an error.
                return
            remaining -= len(chunk)


class ShardServerThread:
    """A ``ShardServer`` on its own event loop in its own (non-daemon) thread.

    For synchronous callers such as tests and command-line tools: ``start()`` returns the base URL,
    ``close()`` stops the server and joins the thread. Also a context manager. The thread is not a
    daemon, so a forgotten ``close()`` keeps the process alive instead of cutting a response short.
    """

    def __init__(self, directory: Path, port: int = 0) -> None:
        self.server = ShardServer(directory)
        self._port = port
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def bytes_sent(self) -> int:
        # An int written by the server thread and read here: a single atomic load in CPython.
        return self.server.bytes_sent

    def start(self) -> str:
        """Start the thread and the server; return the base URL or raise what start() raised."""
        if self._thread is not None:
            raise RuntimeError("the shard server thread is already started")
        started: Future[str] = Future()
        self._thread = threading.Thread(
            target=self._run, args=(started,), name="shard-server", daemon=False
        )
        self._thread.start()
        try:
            return started.result()
        except BaseException:
            self._thread.join()
            self._thread = None
            raise

    def close(self) -> None:
        """Stop the server, close its connections and wait for the thread. Idempotent."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)
        thread.join()

    def __enter__(self) -> ShardServerThread:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, started: Future[str]) -> None:
        asyncio.run(self._main(started))

    async def _main(self, started: Future[str]) -> None:
        stop = asyncio.Event()
        try:
            url = await self.server.start(self._port)
        except BaseException as exc:
            started.set_exception(exc)
            return
        # Published before the URL, so that close() (which can only follow start()) sees them.
        self._loop, self._stop = asyncio.get_running_loop(), stop
        started.set_result(url)
        try:
            await stop.wait()
        finally:
            await self.server.close()
            self._loop = self._stop = None
