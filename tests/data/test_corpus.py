from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from core.data import DataError, write_demo_corpus
from core.data.corpus import MANIFEST

NUMBERS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
]
NUMBERS += ["fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]


def read_lines(paths: list[Path]) -> list[str]:
    return [line for path in paths for line in gzip.open(path, "rt", encoding="utf-8")]


def test_same_seed_same_bytes_other_seed_other_text(tmp_path: Path) -> None:
    first = write_demo_corpus(tmp_path / "a", shards=3, megabytes=0.1, seed=7)
    second = write_demo_corpus(tmp_path / "b", shards=3, megabytes=0.1, seed=7)
    other = write_demo_corpus(tmp_path / "c", shards=3, megabytes=0.1, seed=8)
    assert [p.name for p in first] == [
        "shard-00000.jsonl.gz",
        "shard-00001.jsonl.gz",
        "shard-00002.jsonl.gz",
    ]
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    assert read_lines(first) != read_lines(other)
    # Shards of one corpus differ from each other too.
    assert len({p.read_bytes() for p in first}) == 3


def test_size_and_line_format(tmp_path: Path) -> None:
    paths = write_demo_corpus(tmp_path, shards=2, megabytes=0.2, seed=0)
    lines = read_lines(paths)
    raw = sum(len(line.encode()) for line in lines)
    assert 200_000 <= raw < 200_000 * 1.01  # overshoots by at most one paragraph per shard
    texts = [json.loads(line)["text"] for line in lines]
    assert all(set(json.loads(line)) == {"text"} for line in lines)
    assert all(20 < len(text) < 1000 and text.endswith((".", "?")) for text in texts)
    words = {word for text in texts for word in re.findall(r"[a-z]+", text.lower())}
    assert 200 <= len(words) <= 600  # a few hundred words


def test_the_text_has_learnable_structure(tmp_path: Path) -> None:
    texts = [
        json.loads(line)["text"]
        for line in read_lines(write_demo_corpus(tmp_path, shards=1, megabytes=0.1))
    ]
    corpus = " ".join(texts)
    counts = re.findall(r"counts ([a-z, ]+) and ([a-z]+)\.", corpus)
    assert len(counts) > 50
    for head, last in counts:
        run = [NUMBERS.index(word) for word in [*head.split(", "), last]]
        assert run == list(range(run[0], run[0] + len(run)))
    sums = re.findall(
        r"has ([a-z]+) [a-z]+\. (?:She|He) eats one, so (?:she|he) has ([a-z]+) ", corpus
    )
    assert len(sums) > 50
    assert all(NUMBERS.index(had) - 1 == NUMBERS.index(left) for had, left in sums)
    lowered = corpus.lower()
    assert "the fox yelps" in lowered
    assert "the foxes yelp" in lowered
    assert "the fox yelp " not in lowered
    assert "the foxes yelps" not in lowered


def test_an_existing_corpus_is_reused_and_a_changed_one_rewritten(tmp_path: Path) -> None:
    paths = write_demo_corpus(tmp_path, shards=3, megabytes=0.05, seed=1)
    stamps = [p.stat().st_mtime_ns for p in paths]
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest["seed"] == 1
    assert len(manifest["files"]) == 3

    assert write_demo_corpus(tmp_path, shards=3, megabytes=0.05, seed=1) == paths
    assert [p.stat().st_mtime_ns for p in paths] == stamps  # nothing was written

    original = paths[1].read_bytes()
    paths[1].write_bytes(original[:100])  # a damaged (truncated) shard is noticed and rewritten
    write_demo_corpus(tmp_path, shards=3, megabytes=0.05, seed=1)
    assert paths[1].read_bytes() == original

    fewer = write_demo_corpus(tmp_path, shards=2, megabytes=0.05, seed=1)
    assert sorted(p.name for p in tmp_path.glob("*.jsonl.gz")) == [p.name for p in fewer]
    assert not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize(
    ("shards", "megabytes"), [(0, 1.0), (2, 0.0), (2, -1.0), (2, float("nan"))]
)
def test_bad_arguments(tmp_path: Path, shards: int, megabytes: float) -> None:
    with pytest.raises(DataError):
        write_demo_corpus(tmp_path, shards=shards, megabytes=megabytes)
