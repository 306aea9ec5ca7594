"""A tiny collaborative project to export: its manifest, tokenizer and a trained-looking
checkpoint (seconds to make, no data read)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from core.data import TextTokenizer, load_tokenizer, train_tokenizer
from core.models.albert import AlbertMLM
from core.project import load_manifest
from core.training.checkpoints import CheckpointStore
from core.training.peer.recipe import build_model

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "volunteers train one model together on their own computers",
    "each peer averages its progress with the others",
    "a shared layer is applied again at every depth",
] * 10
VOCAB = 128
EPOCH = 7
SAMPLES = 1234


def manifest_text(
    *, vocab: int = VOCAB, hidden: int = 32, tokenizer: str = "tokenizer.json"
) -> str:
    return f"""
[project]
name = "tiny-export"
description = "A tiny model to export."

[model]
vocab_size = {vocab}
embedding_size = 16
hidden_size = {hidden}
num_layers = 3
num_heads = 4
intermediate_size = 64
max_position = 32

[data]
seq_len = 32
tokenizer = "{tokenizer}"
tokenizer_vocab_size = {vocab}

[[data.sources]]
urls = ["shards/shard-00000.jsonl.gz", "shards/shard-00001.jsonl.gz"]
"""


@dataclass(frozen=True)
class Project:
    folder: Path
    manifest: Path
    checkpoints: Path
    checkpoint: Path
    model: AlbertMLM
    tokenizer: TextTokenizer


@pytest.fixture(scope="session")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    train_tokenizer(TEXTS, 120, path)
    return path


def trained(manifest: Path) -> AlbertMLM:
    """The manifest's model with every weight moved off its initial value, so that a tensor
    exported to the wrong place (or a zero bias or unit norm left out) changes the output."""
    model = build_model(load_manifest(manifest))
    assert isinstance(model, AlbertMLM)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return model.eval()


def save(model: AlbertMLM, checkpoints: Path, epoch: int = EPOCH) -> Path:
    metadata = {"epoch": epoch, "samples": SAMPLES}
    path = CheckpointStore(checkpoints).save(epoch, model.state_dict(), {}, metadata, loss=3.5)
    assert path is not None
    return path


@pytest.fixture
def project(tmp_path: Path, tokenizer_file: Path) -> Project:
    folder = tmp_path / "tiny-export"
    folder.mkdir()
    manifest = folder / "project.toml"
    manifest.write_text(manifest_text())
    shutil.copy(tokenizer_file, folder / "tokenizer.json")
    model = trained(manifest)
    checkpoints = folder / "aux" / "checkpoints"
    checkpoint = save(model, checkpoints)
    return Project(folder, manifest, checkpoints, checkpoint, model, load_tokenizer(tokenizer_file))
