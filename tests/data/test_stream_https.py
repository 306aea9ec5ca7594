"""Shards over HTTPS: every reader (datasets for JSON Lines and Parquet, urllib for plain text)
verifies the server against the system's trust store (``core.util.web_client``), which the test
points at its own authority with ``SSL_CERT_FILE`` after aiohttp was imported: a reader on
aiohttp's or Python's default context would not see it."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from core.data import DataError
from core.data.readers import read_shard
from tests.data.shards import write_shard
from tests.support.certificates import Pki, make_pki

TEXTS = [f"secure line {i}" for i in range(25)]
SHARDS = {
    "a.jsonl": "jsonl",
    "b.jsonl.gz": "jsonl",
    "c.parquet": "parquet",
    "d.txt": "text",
    "e.txt.gz": "text",
}


class HttpsFolder:
    """The files of a folder over HTTPS on 127.0.0.1 (range requests too), on its own thread."""

    def __init__(self, folder: Path, pki: Pki) -> None:
        self.folder = folder
        self.pki = pki
        self.url = ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),))

    def __enter__(self) -> HttpsFolder:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        app = web.Application()
        app.router.add_static("/", self.folder)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.pki.cert, self.pki.key)
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        self.url = f"https://127.0.0.1:{runner.addresses[0][1]}/"
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[HttpsFolder]:
    shards = tmp_path / "shards"
    shards.mkdir()
    for name in SHARDS:
        write_shard(shards / name, TEXTS)
    with HttpsFolder(shards, make_pki(tmp_path / "pki")) as folder:
        yield folder


def test_every_format_streams_over_https_from_a_trusted_server(
    served: HttpsFolder, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(served.pki.ca))
    for name, fmt in SHARDS.items():
        texts = list(read_shard(served.url + name, fmt=fmt, cache_dir=str(tmp_path / "cache")))
        assert texts == TEXTS, name


def test_an_untrusted_server_is_refused_naming_the_certificate(
    served: HttpsFolder, tmp_path: Path
) -> None:
    with pytest.raises(DataError) as refused:
        list(read_shard(served.url + "d.txt", fmt="text"))
    assert f"cannot read shard {served.url}d.txt: its TLS certificate is not trusted" in str(
        refused.value
    )
    # datasets reports every failure to open a remote file as a missing one: at least it fails
    with pytest.raises(DataError, match=r"a\.jsonl"):
        list(read_shard(served.url + "a.jsonl", fmt="jsonl", cache_dir=str(tmp_path / "cache")))
