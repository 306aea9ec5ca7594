"""The demo's data: the corpus shards and the tokenizer the demo manifest names, made once.

``barnraise swarm`` serves them to its peers over a local HTTP server (``core.data.ShardServer``);
tests and benchmarks that run the demo's peers themselves prepare them the same way. The corpus is
real prose from Python's own documentation (``core.data.stdlib_text``): 8 training shards and a
held-out one (``shards/held-out/``) that no peer trains on. The tokenizer is trained on the training
shards once and kept, unless the file there cannot be loaded or the corpus was written after it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from core.project import Manifest
from core.util.process.resources import resource_path

DEMO_MANIFEST = resource_path("demo/project.toml")
"""The demo project's manifest, among the data files (the checkout's, the wheel's or the bundle's)."""
SHARDS = 8
TOKENIZER_SAMPLE = 20_000
"""Texts the tokenizer is trained on."""


def prepare_demo_data(manifest: Manifest, root: Path, *, packages: bool = False) -> None:
    """The shards and tokenizer the demo manifest names, written once under ``root``
    (``packages``: the larger corpus with the installed packages' docstrings, for benchmarks)."""
    # imported here: torch and datasets load slowly, and the rest of the package never needs them
    from core.data import (  # noqa: PLC0415
        DataSource,
        load_tokenizer,
        stream_texts,
        train_tokenizer,
    )
    from core.data.shard_files import MANIFEST  # noqa: PLC0415
    from core.data.stdlib_text import write_stdlib_corpus  # noqa: PLC0415

    write_stdlib_corpus(root / "shards", shards=SHARDS, seed=0, packages=packages)
    tokenizer = root / manifest.data.tokenizer
    # the corpus is rewritten when it changes (another Python, an older demo's text), and a
    # tokenizer trained on what was there before would not fit the new text
    written = (root / "shards" / MANIFEST).stat().st_mtime
    if tokenizer.exists() and tokenizer.stat().st_mtime >= written:
        with contextlib.suppress(Exception):  # a damaged one is trained again below
            load_tokenizer(tokenizer)
            return
    sources = [
        DataSource(tuple(str(root / u) for u in s.urls), format=s.format, text_field=s.text_field)
        for s in manifest.data.sources
    ]
    texts = stream_texts(sources, seed=0, shuffle_buffer=0)
    sample = (next(texts) for _ in range(TOKENIZER_SAMPLE))
    train_tokenizer(sample, manifest.data.tokenizer_vocab_size, tokenizer)
