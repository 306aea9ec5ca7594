"""stream_texts over HTTP from a local ShardServer: the acceptance test of remote streaming."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from aiohttp import web

from core.data import DataError, DataSource, ShardServerThread, stream_texts
from core.data.server import ShardServer
from tests.data.shards import line_of, shard_of, shard_texts, write_shards


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ShardServerThread]:
    with ShardServerThread(tmp_path) as running:
        yield running


def take(stream: Iterator[str], count: int) -> list[str]:
    return list(itertools.islice(stream, count))


def test_a_served_dataset_streams_shuffles_and_mixes(
    tmp_path: Path, server: ShardServerThread
) -> None:
    news = shard_texts(shards=4, per_shard=60, tag="news")
    books = shard_texts(shards=3, per_shard=40, tag="books")
    notes = shard_texts(shards=2, per_shard=30, tag="notes")
    files = [
        write_shards(tmp_path, news, ".jsonl.gz", prefix="news"),
        write_shards(tmp_path, books, ".parquet", prefix="books"),
        write_shards(tmp_path, notes, ".txt", prefix="notes"),
    ]
    weights = (3.0, 1.0, 1.0)

    def sources(location: str) -> list[DataSource]:
        return [
            DataSource(urls=tuple(location + path.name for path in paths), weight=weight)
            for paths, weight in zip(files, weights, strict=True)
        ]

    remote = sources(server.url)
    assert all(url.startswith("http://127.0.0.1:") for url in remote[1].urls)
    mixed = take(stream_texts(remote, seed=21, shuffle_buffer=32), 2500)

    # Mixed as weighted: 3 : 1 : 1.
    share = {
        tag: sum(t.startswith(tag + " ") for t in mixed) / len(mixed)
        for tag in ("news", "books", "notes")
    }
    assert 0.57 < share["news"] < 0.63
    assert 0.17 < share["books"] < 0.23
    assert 0.17 < share["notes"] < 0.23
    # Each source's first pass holds each of its texts once, shuffled (not in file order).
    for tag, texts in (("news", news), ("books", books), ("notes", notes)):
        everything = sorted(itertools.chain.from_iterable(texts))
        first_pass = [t for t in mixed if t.startswith(tag + " ")][: len(everything)]
        assert sorted(first_pass) == everything
        in_file_order = sorted(first_pass, key=lambda t: (shard_of(t), line_of(t)))
        assert first_pass != in_file_order
    # Another peer (seed) gets another order; the same seed from local files gets the very same
    # stream: HTTP changes where bytes come from, nothing else.
    other = take(stream_texts(remote, seed=22, shuffle_buffer=32), 2500)
    assert other != mixed
    local = take(stream_texts(sources(str(tmp_path) + "/"), seed=21, shuffle_buffer=32), 2500)
    assert local == mixed
    assert server.bytes_sent > 0


@dataclass
class Sent:
    """One response body: the bytes it was asked for and the bytes the server wrote."""

    wanted: int
    whole_file: bool
    written: int = 0


@pytest.fixture
def responses(monkeypatch: pytest.MonkeyPatch) -> list[Sent]:
    """Every response body the shard server sends, recorded as it goes.

    The server's total alone says little: fsspec checks that a file exists with a plain GET it
    abandons after the headers, and how much of that body reaches the socket buffers before the
    hang-up depends on the scheduler. Per response, the probe shows as a whole-file body cut short.
    """
    sent: list[Sent] = []
    send_body = ShardServer._send_body

    async def recording(
        self: ShardServer, file: BinaryIO, start: int, stop: int, response: web.StreamResponse
    ) -> None:
        entry = Sent(stop - start, whole_file=stop - start == os.fstat(file.fileno()).st_size)
        sent.append(entry)
        write = response.write

        async def counted(data: bytes | bytearray | memoryview) -> None:
            entry.written += len(data)
            await write(data)

        response.write = counted  # type: ignore[method-assign]
        await send_body(self, file, start, stop, response)

    monkeypatch.setattr(ShardServer, "_send_body", recording)
    return sent


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".parquet", ".txt"])
def test_streaming_starts_before_a_large_shard_is_sent(
    tmp_path: Path, server: ShardServerThread, responses: list[Sent], suffix: str
) -> None:
    # ~40 MB of incompressible text, so the shard is large on the wire in every format.
    rows = [secrets.token_hex(500) for _ in range(40_000)]
    path = tmp_path / f"large{suffix}"
    if suffix == ".parquet":
        pq.write_table(pa.table({"text": rows}), path, row_group_size=1000, compression="none")
    elif suffix == ".jsonl.gz":
        with gzip.open(path, "wt", compresslevel=1) as out:
            out.writelines(json.dumps({"text": row}) + "\n" for row in rows)
    else:
        path.write_text("".join(row + "\n" for row in rows))
    size = path.stat().st_size
    assert size > 20_000_000

    stream = stream_texts([DataSource(urls=(server.url + path.name,))], seed=0, shuffle_buffer=0)
    first = next(stream)
    before_first = list(responses)
    stream.close()
    assert first == rows[0]
    # No whole-shard body was sent to the end before the first text ...
    assert not [r for r in before_first if r.whole_file and r.written == r.wanted]
    # ... and the parts read were a small share of it.
    in_parts = sum(r.written for r in before_first if not r.whole_file)
    assert in_parts < size / 2, f"{in_parts} of {size} bytes read in parts before the first text"


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".parquet", ".txt"])
def test_a_missing_remote_shard_is_a_data_error_naming_it(
    tmp_path: Path, server: ShardServerThread, suffix: str
) -> None:
    (good,) = write_shards(tmp_path, shard_texts(1, 10), suffix)
    missing = f"{server.url}gone{suffix}"
    source = DataSource(urls=(server.url + good.name, missing))
    with pytest.raises(DataError, match=missing.replace(".", r"\.")) as caught:
        take(stream_texts([source], seed=0), 100)
    assert "404" in str(caught.value) or "not found" in str(caught.value)


def test_a_damaged_remote_shard_is_a_data_error_naming_it(
    tmp_path: Path, server: ShardServerThread
) -> None:
    data = gzip.compress(b'{"text": "hello there"}\n' * 100_000)
    (tmp_path / "damaged.jsonl.gz").write_bytes(data[: len(data) // 2])
    url = server.url + "damaged.jsonl.gz"
    stream = stream_texts([DataSource(urls=(url,))], seed=0, shuffle_buffer=0)
    assert next(stream) == "hello there"  # the damage is further in
    with pytest.raises(DataError, match=url.replace(".", r"\.")):
        take(stream, 200_000)


def test_an_unreachable_server_is_a_data_error(tmp_path: Path) -> None:
    with ShardServerThread(tmp_path) as gone:
        url = gone.url + "a.jsonl.gz"
    with pytest.raises(DataError, match="cannot be reached"):
        next(stream_texts([DataSource(urls=(url,))], seed=0))
