"""stream_texts on local shards: formats, passes, shard order, shuffle buffer, mixing, errors."""

from __future__ import annotations

import gzip
import itertools
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.data import DataError, DataSource, stream_texts
from tests.data.shards import line_of, shard_of, shard_texts, write_shard, write_shards


def take(stream: Iterator[str], count: int) -> list[str]:
    return list(itertools.islice(stream, count))


def shard_order(texts: list[str]) -> list[int]:
    """The shards in the order a stream visited them (consecutive repeats collapsed)."""
    return [shard for shard, _ in itertools.groupby(shard_of(text) for text in texts)]


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl", ".parquet", ".txt", ".txt.gz"])
def test_every_text_once_per_pass_in_every_format(tmp_path: Path, suffix: str) -> None:
    texts = shard_texts(shards=3, per_shard=20)
    source = DataSource(urls=tuple(str(p) for p in write_shards(tmp_path, texts, suffix)))
    everything = sorted(itertools.chain.from_iterable(texts))
    stream = stream_texts([source], seed=3, shuffle_buffer=0)
    first, second = take(stream, 60), take(stream, 60)
    stream.close()
    assert sorted(first) == everything
    assert sorted(second) == everything
    # Without a buffer each shard is read whole and in file order.
    assert [line_of(t) for t in first] == list(range(20)) * 3
    assert len(shard_order(first)) == 3


def test_file_urls_work_like_paths(tmp_path: Path) -> None:
    paths = write_shards(tmp_path, shard_texts(2, 5), ".jsonl.gz")
    by_path = DataSource(urls=tuple(str(p) for p in paths))
    by_url = DataSource(urls=tuple(p.as_uri() for p in paths))
    assert take(stream_texts([by_path], seed=1), 30) == take(stream_texts([by_url], seed=1), 30)


def test_shard_order_depends_on_seed_and_pass(tmp_path: Path) -> None:
    texts = shard_texts(shards=6, per_shard=5)
    source = DataSource(urls=tuple(str(p) for p in write_shards(tmp_path, texts, ".jsonl.gz")))
    orders = {}
    for seed in range(4):
        stream = stream_texts([source], seed=seed, shuffle_buffer=0)
        passes = [take(stream, 30) for _ in range(3)]
        orders[seed] = [tuple(shard_order(one_pass)) for one_pass in passes]
        assert all(sorted(order) == list(range(6)) for order in orders[seed])
        assert len(set(orders[seed])) == 3  # each pass a new order
    first_passes = {orders[seed][0] for seed in orders}
    assert len(first_passes) == 4  # each peer its own order
    # The same seed gives the same stream.
    again = stream_texts([source], seed=2, shuffle_buffer=0)
    assert [tuple(shard_order(take(again, 30))) for _ in range(3)] == orders[2]


def test_the_buffer_shuffles_within_shards_and_keeps_passes_whole(tmp_path: Path) -> None:
    texts = shard_texts(shards=2, per_shard=100)
    source = DataSource(urls=tuple(str(p) for p in write_shards(tmp_path, texts, ".parquet")))
    everything = sorted(itertools.chain.from_iterable(texts))

    plain = take(stream_texts([source], seed=5, shuffle_buffer=0), 200)
    stream = stream_texts([source], seed=5, shuffle_buffer=50)
    shuffled, second = take(stream, 200), take(stream, 200)
    assert sorted(shuffled) == everything
    assert sorted(second) == everything
    assert shuffled != second

    def inversions(order: list[str]) -> int:
        lines = [line_of(text) for text in order]
        return sum(a > b for a, b in itertools.pairwise(lines))

    assert inversions(plain) == 1  # only where the second shard starts
    assert inversions(shuffled) > 50
    # Same shard order; a text can come out at most a buffer's length earlier than unshuffled.
    assert shard_order(plain) == list(dict.fromkeys(shard_of(text) for text in shuffled))
    positions = {text: index for index, text in enumerate(shuffled)}
    assert min(positions[text] - index for index, text in enumerate(plain)) >= -50


def test_empty_texts_are_skipped_and_an_empty_source_is_an_error(tmp_path: Path) -> None:
    path = write_shard(tmp_path / "a.jsonl", ["one", "", "   ", "two"])
    stream = stream_texts([DataSource(urls=(str(path),))], seed=0, shuffle_buffer=0)
    assert take(stream, 4) == ["one", "two", "one", "two"]

    empty = write_shard(tmp_path / "empty.txt", ["", " "])
    with pytest.raises(DataError, match="found no text"):
        next(stream_texts([DataSource(urls=(str(empty),))], seed=0))


def test_weights_set_the_mix(tmp_path: Path) -> None:
    a = write_shards(tmp_path, shard_texts(3, 50, tag="a"), ".jsonl.gz", prefix="a")
    b = write_shards(tmp_path, shard_texts(2, 30, tag="b"), ".txt", prefix="b")
    sources = [
        DataSource(urls=tuple(map(str, a)), weight=3.0),
        DataSource(urls=tuple(map(str, b)), weight=1.0),
    ]
    mixed = take(stream_texts(sources, seed=11, shuffle_buffer=20), 2000)
    share = sum(text.startswith("a ") for text in mixed) / len(mixed)
    assert 0.72 < share < 0.78
    # Both sources keep their own passes: b's first 60 texts are all of b.
    from_b = [text for text in mixed if text.startswith("b ")]
    assert sorted(from_b[:60]) == sorted(itertools.chain.from_iterable(shard_texts(2, 30, "b")))
    assert mixed == take(stream_texts(sources, seed=11, shuffle_buffer=20), 2000)


def test_unreadable_shards_raise_data_error_naming_them(tmp_path: Path) -> None:
    good = write_shard(tmp_path / "good.jsonl.gz", ["fine"] * 10)
    missing = tmp_path / "missing.jsonl.gz"
    with pytest.raises(DataError, match=f"{missing}: not found"):
        take(stream_texts([DataSource(urls=(str(good), str(missing)))], seed=0), 100)

    damaged = tmp_path / "damaged.jsonl.gz"
    data = gzip.compress(b'{"text": "hello there"}\n' * 5000)
    damaged.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=str(damaged)):
        take(stream_texts([DataSource(urls=(str(damaged),))], seed=0), 100_000)

    damaged_text = tmp_path / "damaged.txt.gz"
    damaged_text.write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match=str(damaged_text)):
        next(stream_texts([DataSource(urls=(str(damaged_text),))], seed=0))

    other_field = write_shard(tmp_path / "other.jsonl", ["x"], field="body")
    with pytest.raises(DataError, match="no field 'text'"):
        next(stream_texts([DataSource(urls=(str(other_field),))], seed=0))
    body = stream_texts([DataSource(urls=(str(other_field),), text_field="body")], seed=0)
    assert next(body) == "x"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sources": []}, "no data sources"),
        ({"sources": ["a.txt"]}, "expected a DataSource"),
        ({"seed": -1}, "non-negative"),
        ({"seed": 1.5}, "non-negative"),
        ({"shuffle_buffer": -1}, "shuffle_buffer"),
    ],
)
def test_bad_arguments_fail_at_once(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"sources": [DataSource(urls=("a.txt",))], "seed": 0, **kwargs}
    with pytest.raises(DataError, match=message):
        stream_texts(**arguments)  # type: ignore[arg-type]  # not iterated: checks come first


def test_scratch_folders_of_dead_processes_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    command = [sys.executable, "-c", "import os; print(os.getpid())"]
    dead = subprocess.run(command, capture_output=True, text=True, check=True)
    stale = tmp_path / f"barnraise-stream-{dead.stdout.strip()}-abc"
    alive = tmp_path / f"barnraise-stream-{os.getpid()}-def"
    for folder in (stale, alive):
        folder.mkdir()
        (folder / "x.lock").touch()
    paths = write_shards(tmp_path, shard_texts(2, 3), ".jsonl")
    texts = stream_texts([DataSource(tuple(str(p) for p in paths))], seed=0, shuffle_buffer=0)
    next(texts)
    assert not stale.exists()  # its process is gone
    assert alive.exists()  # ours (another stream of this process) stays
    mine = [p for p in tmp_path.glob(f"barnraise-stream-{os.getpid()}-*") if p != alive]
    assert len(mine) == 1
    texts.close()
    assert not mine[0].exists()
