"""Tiny collaborative projects to export, an ALBERT and a Llama-shaped model (tied and untied):
their manifests, tokenizer and trained-looking checkpoints (seconds to make, no data read)."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
import torch
from torch import nn

from core.data import TextTokenizer, load_tokenizer, train_tokenizer
from core.models.albert import AlbertMLM
from core.models.llama import LlamaCLM
from core.project import load_manifest
from core.training.checkpoints import CheckpointStore
from core.training.credit.samples import SAMPLES_TOTAL
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
"""The last epoch's samples, which a checkpoint records beside the samples behind it."""
ROOT = Path(__file__).resolve().parents[2]
LLAMA_DEMO = ROOT / "resources" / "llama-demo" / "project.toml"
ROPE_THETA = 5000.0
"""Not the preset's base, so that a base lost on the way changes the logits."""
_Model = TypeVar("_Model", bound=nn.Module)


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


def llama_manifest_text(*, tied: bool, vocab: int = VOCAB) -> str:
    """The llama-demo preset shrunk to a tiny model: its [model] table (grouped-query attention
    included) made small, the rest of the preset as it is."""
    model = f"""[model]
kind = "llama-clm"
vocab_size = {vocab}
hidden_size = 32
num_layers = 2
num_heads = 4
num_kv_heads = 2
intermediate_size = 64
max_position = 32
rope_theta = {ROPE_THETA}
tie_embeddings = {str(tied).lower()}

"""
    text = LLAMA_DEMO.read_text()
    text, found = re.subn(r"(?ms)^\[model\]\n.*?^(?=\[data\]$)", model, text)
    assert found == 1, "the llama-demo preset has no [model] table before [data]"
    text = re.sub(r"(?m)^seq_len = \d+", "seq_len = 32", text)
    text, found = re.subn(
        r"(?m)^tokenizer_vocab_size = \d+", f"tokenizer_vocab_size = {vocab}", text
    )
    assert found == 1
    return text


@dataclass(frozen=True)
class Project:
    folder: Path
    manifest: Path
    checkpoints: Path
    checkpoint: Path
    model: AlbertMLM
    tokenizer: TextTokenizer


@dataclass(frozen=True)
class LlamaProject:
    folder: Path
    manifest: Path
    checkpoint: Path
    model: LlamaCLM
    tokenizer: TextTokenizer
    tied: bool


@pytest.fixture(scope="session")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    train_tokenizer(TEXTS, 120, path)
    return path


def moved(model: _Model) -> _Model:
    """``model`` with every weight moved off its initial value, so that a tensor exported to the
    wrong place (or a zero bias or unit norm left out) changes the output."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return model.eval()


def trained(manifest: Path) -> AlbertMLM:
    """The manifest's ALBERT, its weights moved."""
    model = build_model(load_manifest(manifest))
    assert isinstance(model, AlbertMLM)
    return moved(model)


def trained_llama(manifest: Path) -> LlamaCLM:
    """The manifest's Llama, its weights moved (a tied read-out with its embedding)."""
    model = build_model(load_manifest(manifest))
    assert isinstance(model, LlamaCLM)
    return moved(model)


def save(
    model: nn.Module, checkpoints: Path, epoch: int = EPOCH, *, samples_total: int | None = None
) -> Path:
    """A checkpoint as the backbone writes it; without ``samples_total``, one that does not
    record the samples behind it."""
    metadata: dict[str, object] = {"epoch": epoch, "samples": SAMPLES}
    if samples_total is not None:
        metadata[SAMPLES_TOTAL] = samples_total
    path = CheckpointStore(checkpoints).save(epoch, model.state_dict(), {}, metadata, loss=3.5)
    assert path is not None
    return path


# ---- the backbone's logs beside its checkpoints -------------------------------------------------


def write_lines(path: Path, lines: list[object]) -> None:
    """JSON lines as the backbone logs them; a str is written as it is (a damaged line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.write_text(text)


def held_out(epoch: int, loss: float | None, floor: float | None = 6.2412) -> dict[str, object]:
    """An ``evaluation.jsonl`` line (``PeerEvaluation``'s fields; an old one has no floor)."""
    line: dict[str, object] = {
        "epoch": epoch,
        "loss": loss,
        "accuracy": 0.4125,
        "samples": 512,
        "tokens": 9000,
        "seconds": 3.0,
        "time": 1_700_000_000.0,
    }
    if floor is not None:
        line["floor"] = floor
    return line


def epoch_line(epoch: int, contributions: dict[str, int], **flags: bool) -> dict[str, object]:
    """A ``metrics.jsonl`` line (``EpochMetrics.summary``)."""
    samples = sum(contributions.values())
    return {
        "epoch": epoch,
        "loss": 6.0,
        "samples": samples,
        "contributions": contributions,
        **flags,
    }


@pytest.fixture
def project(tmp_path: Path, tokenizer_file: Path) -> Project:
    folder = tmp_path / "tiny-export"
    folder.mkdir()
    manifest = folder / "project.toml"
    manifest.write_text(manifest_text())
    shutil.copy(tokenizer_file, folder / "tokenizer.json")
    model = trained(manifest)
    checkpoints = folder / "backbone" / "checkpoints"
    checkpoint = save(model, checkpoints)
    return Project(folder, manifest, checkpoints, checkpoint, model, load_tokenizer(tokenizer_file))


@pytest.fixture(params=[True, False], ids=["tied", "untied"])
def llama_project(
    request: pytest.FixtureRequest, tmp_path: Path, tokenizer_file: Path
) -> LlamaProject:
    tied: bool = request.param
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    manifest = folder / "project.toml"
    manifest.write_text(llama_manifest_text(tied=tied))
    shutil.copy(tokenizer_file, folder / "tokenizer.json")
    model = trained_llama(manifest)
    checkpoint = save(model, folder / "backbone" / "checkpoints")
    return LlamaProject(folder, manifest, checkpoint, model, load_tokenizer(tokenizer_file), tied)
