"""A tokenizer named by URL is fetched at every start, so a replaced one is never kept stale; the
copy from an earlier start serves only when the URL does not answer."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from core.data import ShardServerThread, train_tokenizer
from core.project import load_manifest
from core.swarm.demo_data import DEMO_MANIFEST
from core.training.peer.recipe import fetch_tokenizer

TEXTS = [f"the river {i} runs past the old mill and the bridge number {i * 7}" for i in range(200)]


def test_a_replaced_tokenizer_is_fetched_again_and_a_silent_url_keeps_the_copy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    served, work = tmp_path / "www", tmp_path / "work"
    served.mkdir()
    manifest = load_manifest(DEMO_MANIFEST)
    small = train_tokenizer(TEXTS, 40, served / "tokenizer.json").vocab_size
    with ShardServerThread(served) as server:
        assert fetch_tokenizer(manifest, server.url, work).vocab_size == small
        larger = train_tokenizer(TEXTS, 120, served / "tokenizer.json").vocab_size
        assert larger > small
        assert fetch_tokenizer(manifest, server.url, work).vocab_size == larger
        url = server.url
    with caplog.at_level(logging.WARNING, "core.training.peer.recipe"):
        assert fetch_tokenizer(manifest, url, work).vocab_size == larger  # nobody answers
    assert "using the copy kept" in caplog.text
    with pytest.raises(OSError, match="refused"):
        fetch_tokenizer(manifest, url, tmp_path / "fresh")  # and no copy to fall back on
