"""A project served by URL for tests: its manifest's text, a coordinator on 127.0.0.1 serving it
signed (``GET /manifest``), and rewriting the organizer's file so the coordinator sees a change."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from core.coordinator import CoordinatorService
from core.net import Identity
from core.project import load_any_manifest

PROJECT = "url-test"
SCRYPT_N = 2**10
DATA = "http://127.0.0.1:9/shard-0.jsonl"
TOKENIZER = "http://127.0.0.1:9/tokenizer.json"


def project_text(
    key: Identity | None,
    *,
    name: str = PROJECT,
    description: str = "A project joined by its URL.",
    hidden_size: int = 128,
    peers: Sequence[str] = (),
    sources: Sequence[str] = (DATA,),
    tokenizer: str = TOKENIZER,
    lr: float = 0.01,
) -> str:
    """An open collaborative project's manifest naming ``key`` (None: naming no key)."""
    peer_list = ", ".join(f'"{p}"' for p in peers)
    url_list = ", ".join(f'"{u}"' for u in sources)
    named = f'project_key = "{key.peer_id}"' if key is not None else ""
    return f"""
[project]
name = "{name}"
description = "{description}"

[model]
vocab_size = 512
embedding_size = 32
hidden_size = {hidden_size}
num_layers = 2
num_heads = 4
intermediate_size = 256
max_position = 64

[data]
seq_len = 64
tokenizer = "{tokenizer}"
tokenizer_vocab_size = 512

[[data.sources]]
urls = [{url_list}]
format = "jsonl"

[training]
target_batch_size = 256
microbatch_size = 16
lr = {lr}

[network]
initial_peers = [{peer_list}]

[access]
mode = "open"
{named}
"""


def rewrite(path: Path, text: str) -> None:
    """Replace the file's text, its modification time moved on a second: the coordinator notices
    a change by the time, size and inode, and a rewrite within one clock tick keeps the time."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


def prepare(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rewrite(path, text)


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, key: Identity, text: str) -> AsyncIterator[CoordinatorService]:
    """A coordinator on 127.0.0.1 serving the manifest file ``tmp_path/project.toml``."""
    path = tmp_path / "project.toml"
    prepare(path, text)
    service = CoordinatorService(
        load_any_manifest(path), tmp_path / "coordinator.db", key, scrypt_n=SCRYPT_N
    )
    await service.start("127.0.0.1", 0)
    try:
        yield service
    finally:
        await service.close()
