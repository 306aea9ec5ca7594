from __future__ import annotations

import math
from pathlib import Path

import pytest

from core.data import DataError, DataSource
from core.data.sources import infer_format, local_location


@pytest.mark.parametrize(
    ("url", "fmt"),
    [
        ("data/shard-0.jsonl", "jsonl"),
        ("data/shard-0.jsonl.gz", "jsonl"),
        ("/abs/shard.json.gz", "jsonl"),
        ("shard.parquet", "parquet"),
        ("SHARD.PARQUET", "parquet"),
        ("books.txt", "text"),
        ("books.txt.gz", "text"),
        ("file:///data/a.txt", "text"),
        ("https://example.org/data/a.parquet?download=1#x", "parquet"),
        ("http://127.0.0.1:8000/a.jsonl.gz", "jsonl"),
        ("a.csv", None),
        ("a.gz", None),
        ("https://example.org/a.parquet/", None),
    ],
)
def test_format_is_inferred_from_the_suffix(url: str, fmt: str | None) -> None:
    assert infer_format(url) == fmt


def test_a_valid_source() -> None:
    source = DataSource(urls=["a.jsonl.gz", "b.parquet", "c.txt"], weight=2)  # type: ignore[arg-type]
    assert source.urls == ("a.jsonl.gz", "b.parquet", "c.txt")  # a list is stored as a tuple
    assert [source.format_of(url) for url in source.urls] == ["jsonl", "parquet", "text"]
    hash(source)  # frozen and hashable
    explicit = DataSource(urls=("data.csv",), format="text")
    assert explicit.format_of("data.csv") == "text"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"urls": ()}, "at least one shard URL"),
        ({"urls": "a.jsonl"}, "list of URLs"),
        ({"urls": ("a.jsonl", "")}, "non-empty string"),
        ({"urls": ("a.jsonl", 3)}, "non-empty string"),
        ({"urls": ("a.jsonl",), "weight": 0}, "positive"),
        ({"urls": ("a.jsonl",), "weight": -1.5}, "positive"),
        ({"urls": ("a.jsonl",), "weight": math.nan}, "finite"),
        ({"urls": ("a.jsonl",), "weight": math.inf}, "finite"),
        ({"urls": ("a.jsonl",), "weight": "3"}, "finite"),
        ({"urls": ("a.jsonl",), "format": "csv"}, "unknown DataSource format 'csv'"),
        ({"urls": ("a.jsonl", "b.csv")}, "cannot tell the format of b.csv"),
        ({"urls": ("a.jsonl",), "text_field": ""}, "text_field"),
    ],
)
def test_invalid_sources_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(DataError, match=message):
        DataSource(**kwargs)  # type: ignore[arg-type]


def test_local_locations(tmp_path: Path) -> None:
    assert local_location(f"file://{tmp_path}/a%20b.txt") == str(tmp_path / "a b.txt")
    assert local_location("file://localhost/data/x.txt") == "/data/x.txt"
    assert local_location("http://127.0.0.1:1/x.txt") == "http://127.0.0.1:1/x.txt"
    assert local_location("~/x.txt") == str(Path.home() / "x.txt")
    with pytest.raises(DataError, match="must not name a host"):
        local_location("file://server/share/x.txt")
