"""ShardServer: whole files, HEAD, byte ranges, refusals; the thread wrapper cleans up."""

from __future__ import annotations

import http.client
import threading
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from core.data import DataError, ShardServer, ShardServerThread

CONTENT = bytes(range(256)) * 4096  # 1 MiB, several socket writes


@pytest.fixture
def served(tmp_path: Path) -> ShardServerThread:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data.bin").write_bytes(CONTENT)
    (tmp_path / "empty.bin").write_bytes(b"")
    return ShardServerThread(tmp_path)


def fetch(
    url: str, path: str, method: str = "GET", **headers: str
) -> tuple[int, bytes, http.client.HTTPMessage]:
    """Send one raw request (paths are not normalised, unlike urllib's) and read the answer."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request(method, path, headers=headers)
        response = connection.getresponse()
        return response.status, response.read(), response.headers
    finally:
        connection.close()


def test_get_head_and_ranges(served: ShardServerThread) -> None:
    with served:
        url = served.url
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/")
        status, body, headers = fetch(url, "/sub/data.bin")
        assert (status, body) == (200, CONTENT)
        assert headers["Accept-Ranges"] == "bytes"
        assert served.bytes_sent == len(CONTENT)

        status, body, headers = fetch(url, "/sub/data.bin", method="HEAD")
        assert (status, body) == (200, b"")
        assert headers["Content-Length"] == str(len(CONTENT))
        assert served.bytes_sent == len(CONTENT)  # HEAD sends no body

        status, body, headers = fetch(url, "/sub/data.bin", Range="bytes=10-19")
        assert (status, body) == (206, CONTENT[10:20])
        assert headers["Content-Range"] == f"bytes 10-19/{len(CONTENT)}"
        assert fetch(url, "/sub/data.bin", Range="bytes=-5")[:2] == (206, CONTENT[-5:])
        assert fetch(url, "/sub/data.bin", Range="bytes=1048570-")[:2] == (206, CONTENT[-6:])
        # A range running past the end is cut to the end.
        assert fetch(url, "/sub/data.bin", Range="bytes=1048570-2000000")[:2] == (206, CONTENT[-6:])
        assert served.bytes_sent == len(CONTENT) + 10 + 5 + 6 + 6

        assert fetch(url, "/sub/data.bin", Range=f"bytes={len(CONTENT)}-")[0] == 416
        assert fetch(url, "/sub/data.bin", Range="bytes=20-10")[0] == 416
        assert fetch(url, "/sub/data.bin", Range="lines=1-2")[0] == 416
        assert fetch(url, "/empty.bin")[:2] == (200, b"")


@pytest.mark.parametrize(
    "path",
    [
        "/missing.bin",
        "/sub",
        "/sub/",
        "/../secret.txt",
        "/sub/..%2F..%2Fsecret.txt",
        "/%2e%2e/secret.txt",
    ],
)
def test_only_files_under_the_root_are_served(tmp_path: Path, path: str) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("private")
    with ShardServerThread(root) as server:
        status, body, _ = fetch(server.url, path)
    assert status == 404
    assert b"private" not in body


def test_thread_stops_on_close_and_start_errors_surface(tmp_path: Path) -> None:
    server = ShardServerThread(tmp_path)
    server.start()
    assert any(thread.name == "shard-server" for thread in threading.enumerate())
    port = urlsplit(server.url).port or 0
    with pytest.raises(RuntimeError, match="already started"):
        server.start()
    # The port is taken: a second server on it fails in its thread, and start() says why.
    with pytest.raises(DataError, match=f"127.0.0.1:{port}"):
        ShardServerThread(tmp_path, port=port).start()
    server.close()
    server.close()  # idempotent
    assert not any(thread.name == "shard-server" for thread in threading.enumerate())
    with pytest.raises(DataError, match="not a directory"):
        ShardServerThread(tmp_path / "nope").start()


async def test_async_server(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    server = ShardServer(tmp_path)
    with pytest.raises(RuntimeError, match="not started"):
        server.url  # noqa: B018
    url = await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(url + "a.txt", headers={"Range": "bytes=1-3"}) as response:
                assert response.status == 206
                assert await response.read() == b"ell"
            async with session.head(url + "a.txt") as response:
                assert response.status == 200
                assert response.content_length == 6
    finally:
        await server.close()
    await server.close()
    with pytest.raises(aiohttp.ClientConnectionError):
        async with aiohttp.ClientSession() as session, session.get(url + "a.txt"):
            pass
