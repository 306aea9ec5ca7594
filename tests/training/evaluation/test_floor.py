"""The unigram floor: counted on the tokens training predicts, scored on the tokens evaluation
scores, and equal to what ``measure`` gives a model that predicts those frequencies everywhere."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from core.data import DataError, TextTokenizer, train_tokenizer, write_demo_corpus
from core.project import Manifest, load_manifest
from core.project.evaluation import EvaluationSection
from core.swarm.demo_data import DEMO_MANIFEST
from core.training.evaluation import (
    HeldOutSet,
    below_floor,
    load_held_out,
    measure,
    project_floor,
    unigram_floor,
)
from core.training.evaluation.floor import token_counts, training_texts

IGNORE = -100


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("floor")
    write_demo_corpus(root / "train", shards=2, megabytes=0.05, seed=3)
    write_demo_corpus(root / "held", shards=1, megabytes=0.02, seed=9)
    return root


@pytest.fixture(scope="module")
def tokenizer(corpus: Path) -> TextTokenizer:
    with gzip.open(corpus / "train" / "shard-00000.jsonl.gz", "rt") as lines:
        texts = [json.loads(line)["text"] for line in lines]
    return train_tokenizer(texts, vocab_size=300, path=corpus / "tokenizer.json")


def project(root: Path, kind: str = "albert-mlm") -> Manifest:
    demo = load_manifest(DEMO_MANIFEST)
    data = dataclasses.replace(
        demo.data,
        sources=(
            dataclasses.replace(
                demo.data.sources[0],
                urls=("train/shard-00000.jsonl.gz", "train/shard-00001.jsonl.gz"),
            ),
        ),
    )
    return dataclasses.replace(
        demo,
        model=dataclasses.replace(demo.model, kind=kind),
        data=data,
        evaluation=EvaluationSection(urls=("held/shard-00000.jsonl.gz",), samples=40),  # type: ignore[call-arg]
        path=root / "project.toml",
    )


def test_the_floor_is_the_mean_surprise_of_the_scored_labels() -> None:
    counts = torch.tensor([3, 1, 0, 0])  # add one: 4, 2, 1, 1 of 8
    labels = torch.tensor([[0, IGNORE, 1, 2], [IGNORE, 0, IGNORE, IGNORE]])
    held = HeldOutSet(({"labels": labels},), samples=2, causal=False)
    expected = -(2 * math.log(4 / 8) + math.log(2 / 8) + math.log(1 / 8)) / 4
    assert unigram_floor(counts, held) == pytest.approx(expected)
    # a causal model never predicts the first position: the first row's 0 is not scored
    shifted = HeldOutSet(({"labels": labels},), samples=2, causal=True)
    expected = -(math.log(2 / 8) + math.log(1 / 8) + math.log(4 / 8)) / 3
    assert unigram_floor(counts, shifted) == pytest.approx(expected)


def test_a_set_with_nothing_to_predict_is_refused() -> None:
    held = HeldOutSet(({"labels": torch.full((1, 4), IGNORE)},), samples=1, causal=False)
    with pytest.raises(DataError, match="no token to predict"):
        unigram_floor(torch.ones(4, dtype=torch.int64), held)


def test_counts_are_the_targets_training_packs(tokenizer: TextTokenizer) -> None:
    texts = ["the cat sat on the mat", "a dog ran"]
    ids = tokenizer.encode_batch(texts)
    # [CLS] text [SEP] text [SEP] fills one sequence exactly (training drops a sequence never filled)
    seq_len = len(ids[0]) + len(ids[1]) + 3
    masked = token_counts(texts, tokenizer, seq_len=seq_len, causal=False)
    ordinary = torch.bincount(torch.tensor(ids[0] + ids[1]), minlength=tokenizer.vocab_size)
    assert torch.equal(masked, ordinary)  # specials are never masked, so never counted
    causal = token_counts(texts, tokenizer, seq_len=seq_len, causal=True)
    # every next token: the ordinary ones and the [SEP] closing each text, never the first [CLS]
    assert int(causal[tokenizer.sep_id]) == 2
    assert int(causal[tokenizer.cls_id]) == 0
    assert int(causal.sum()) == len(ids[0]) + len(ids[1]) + 2
    limited = token_counts(texts, tokenizer, seq_len=seq_len, causal=False, limit=3)
    assert int(limited.sum()) == 3


class Frequencies(torch.nn.Module):
    """Predicts the same distribution at every position: a model that only counts tokens."""

    def __init__(self, log_p: torch.Tensor) -> None:
        super().__init__()
        self.log_p = torch.nn.Parameter(log_p.float())

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> SimpleNamespace:
        return SimpleNamespace(logits=self.log_p.expand(*ids.shape, -1))


@pytest.mark.parametrize("kind", ["albert-mlm", "llama-clm"])
def test_a_model_that_only_counts_scores_the_floor(
    corpus: Path, tokenizer: TextTokenizer, kind: str
) -> None:
    manifest = project(corpus, kind)
    held = load_held_out(manifest, tokenizer, data_base=None)
    texts = training_texts(manifest, data_base=None)
    counts = token_counts(texts, tokenizer, seq_len=manifest.data.seq_len, causal=held.causal)
    log_p = torch.log((counts.double() + 1) / (counts.sum() + len(counts)))
    floor = project_floor(manifest, tokenizer, held, data_base=None)
    assert floor == pytest.approx(unigram_floor(counts, held))
    measured = measure(Frequencies(log_p), held.batches, causal=held.causal)
    assert measured.loss == pytest.approx(floor, rel=1e-5)
    # the floor is below a uniform guess and above zero on real text
    assert 0 < floor < math.log(tokenizer.vocab_size)


def test_the_floor_reads_training_shards_never_held_out_ones(
    corpus: Path, tokenizer: TextTokenizer
) -> None:
    manifest = project(corpus)
    urls = [url for url, _ in _shards(manifest)]
    assert urls == [str(corpus / "train" / f"shard-0000{i}.jsonl.gz") for i in (0, 1)]


def _shards(manifest: Manifest) -> list[tuple[str, None]]:
    seen: list[tuple[str, None]] = []
    from core.training.evaluation import floor as module

    original = module.read_shard

    def spy(url: str, **kwargs: object) -> object:
        seen.append((url, None))
        return original(url, **kwargs)  # type: ignore[arg-type]

    module.read_shard = spy  # type: ignore[assignment]
    try:
        list(training_texts(manifest, data_base=None))
    finally:
        module.read_shard = original
    return seen


def test_shards_that_cannot_be_read_give_a_data_error(
    corpus: Path, tokenizer: TextTokenizer, tmp_path: Path
) -> None:
    manifest = dataclasses.replace(project(corpus), path=tmp_path / "project.toml")
    held = load_held_out(project(corpus), tokenizer, data_base=None)
    with pytest.raises(DataError):
        project_floor(manifest, tokenizer, held, data_base=None)


@pytest.mark.parametrize(
    ("loss", "floor", "words"),
    [
        (5.7312, 6.2441, "loss 5.7312 nats, 0.51 below the unigram floor (6.24)"),
        (6.5, 6.2441, "loss 6.5000 nats, 0.26 above the unigram floor (6.24)"),
        (6.5, None, "loss 6.5000 nats"),
        (None, 6.2, "loss not finite"),
    ],
)
def test_a_loss_is_said_beside_its_floor(
    loss: float | None, floor: float | None, words: str
) -> None:
    assert below_floor(loss, floor) == words
