"""Writing a corpus as gzipped JSON Lines shards that are byte-identical for the same input, and the
``corpus.json`` manifest that marks a written corpus complete (so a second call returns at once).

gzip headers carry no time or file name, and every file is written beside its place and renamed
into it, so a reader never sees half a shard and an interrupted write is simply redone.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from collections.abc import Iterable
from pathlib import Path

MANIFEST = "corpus.json"


def jsonl_gz(texts: Iterable[str]) -> tuple[bytes, int]:
    """``texts`` as one gzipped JSON Lines shard (``{"text": ...}`` per line), and its line count."""
    buffer = io.BytesIO()
    lines = 0
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as out:
        for text in texts:
            out.write((json.dumps({"text": text}) + "\n").encode())
            lines += 1
    return buffer.getvalue(), lines


def read_manifest(path: Path) -> dict[str, object] | None:
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def matches(
    manifest: dict[str, object], wanted: dict[str, object], names: list[str], directory: Path
) -> bool:
    """Whether the manifest describes this corpus and every file is still there, at its size."""
    if any(manifest.get(key) != value for key, value in wanted.items()):
        return False
    files = manifest.get("files")
    if not isinstance(files, list) or len(files) != len(names):
        return False
    for entry, name in zip(files, names, strict=True):
        if not isinstance(entry, dict) or entry.get("name") != name:
            return False
        path = directory / str(entry.get("name"))
        if not path.is_file() or path.stat().st_size != entry.get("bytes"):
            return False
    return True


def write_atomically(path: Path, data: bytes) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)
