"""Small shard writers for the data tests: the same texts as JSON Lines, Parquet or plain text."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def shard_texts(shards: int, per_shard: int, tag: str = "t") -> list[list[str]]:
    """Distinct, ordered texts: ``"<tag> shard S line L"``, so each names its shard and position."""
    return [[f"{tag} shard {s} line {i}" for i in range(per_shard)] for s in range(shards)]


def write_shard(path: Path, texts: Sequence[str], *, field: str = "text") -> Path:
    """Write ``texts`` in the format that ``path``'s suffix names."""
    name = path.name
    if name.endswith((".jsonl.gz", ".json.gz")):
        with gzip.open(path, "wt", encoding="utf-8") as out:
            out.writelines(json.dumps({field: text}) + "\n" for text in texts)
    elif name.endswith(".jsonl"):
        path.write_text("".join(json.dumps({field: text}) + "\n" for text in texts))
    elif name.endswith(".parquet"):
        pq.write_table(pa.table({field: list(texts)}), path, row_group_size=max(1, len(texts) // 4))
    elif name.endswith(".txt.gz"):
        with gzip.open(path, "wt", encoding="utf-8") as out:
            out.writelines(text + "\n" for text in texts)
    elif name.endswith(".txt"):
        path.write_text("".join(text + "\n" for text in texts))
    else:
        raise ValueError(f"no writer for {name}")
    return path


def write_shards(
    directory: Path, texts: list[list[str]], suffix: str, *, prefix: str = "shard"
) -> list[Path]:
    """One file per inner list: ``<prefix>-<n><suffix>`` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return [
        write_shard(directory / f"{prefix}-{n}{suffix}", shard) for n, shard in enumerate(texts)
    ]


def shard_of(text: str) -> int:
    """The shard number a ``shard_texts`` text names."""
    return int(text.split(" shard ")[1].split(maxsplit=1)[0])


def line_of(text: str) -> int:
    """The line number a ``shard_texts`` text names."""
    return int(text.rsplit(" line ", 1)[1])
