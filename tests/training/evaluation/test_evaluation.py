"""Held-out evaluation: the set, the figures (against a direct computation), the backbone's
evaluator (due epochs, failures that never stop anything), and the manifest's bounds."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import gzip
import json
import logging
import math
import shutil
from pathlib import Path

import pytest
import torch

from core.data import DataError, TextTokenizer, train_tokenizer, write_demo_corpus
from core.project import Manifest, ManifestError, load_manifest, parse_manifest
from core.project.evaluation import MAX_EVALUATION_SAMPLES, EvaluationSection
from core.swarm.demo_data import DEMO_MANIFEST
from core.training.evaluation import HeldOutEvaluator, load_held_out, measure
from core.training.peer.recipe import build_model
from core.worker.bridge import TrainingBridge
from core.worker.events import PeerEvaluation

IGNORE = -100


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("project")
    write_demo_corpus(root / "held", shards=1, megabytes=0.05, seed=7)
    return root


@pytest.fixture(scope="module")
def tokenizer(corpus: Path) -> TextTokenizer:
    shard = corpus / "held" / "shard-00000.jsonl.gz"
    with gzip.open(shard, "rt") as lines:
        texts = [json.loads(line)["text"] for line in lines]
    return train_tokenizer(texts, vocab_size=300, path=corpus / "tokenizer.json")


def project(root: Path, **evaluation: object) -> Manifest:
    """The demo's manifest in ``root`` (a small model), measured on ``root/held``."""
    demo = load_manifest(DEMO_MANIFEST)
    values = {"urls": ("held/shard-00000.jsonl.gz",), "samples": 40, **evaluation}
    return dataclasses.replace(
        demo,
        evaluation=EvaluationSection(**values),  # type: ignore[arg-type]
        path=root / "project.toml",
    )


def test_the_figures_are_those_of_a_direct_computation(
    corpus: Path, tokenizer: TextTokenizer
) -> None:
    manifest = project(corpus)
    held = load_held_out(manifest, tokenizer, data_base=None)
    assert held.samples == 40
    assert not held.causal
    model = build_model(manifest)
    # trained a little, so that some guesses are right and the accuracy is not trivially 0
    optimizer = torch.optim.Adam(model.parameters(), 1e-2)
    for batch in held.batches[:3]:
        optimizer.zero_grad()
        model(batch["input_ids"], batch["attention_mask"], batch["labels"]).loss.backward()
        optimizer.step()
    model.train()
    measured = measure(model, held.batches, causal=False)
    assert model.training  # its mode is given back

    # one sequence at a time, through the model's own loss: mean over a sequence's masked tokens
    model.eval()
    loss_sum = right = tokens = 0.0
    with torch.no_grad():
        for batch in held.batches:
            for i in range(batch["input_ids"].size(0)):
                ids, mask, labels = (
                    batch[k][i : i + 1] for k in ("input_ids", "attention_mask", "labels")
                )
                count = int((labels != IGNORE).sum())
                if not count:
                    continue
                out = model(ids, mask, labels)
                loss_sum += float(out.loss) * count
                guesses = out.logits.argmax(-1)
                right += int(((guesses == labels) & (labels != IGNORE)).sum())
                tokens += count
    assert measured.tokens == tokens
    assert measured.samples == 40
    assert measured.loss is not None
    assert math.isclose(measured.loss, loss_sum / tokens, rel_tol=1e-5)
    assert measured.accuracy == pytest.approx(right / tokens, abs=1e-12)
    assert 0 < measured.accuracy < 1


def test_every_evaluation_measures_the_same_sequences(
    corpus: Path, tokenizer: TextTokenizer
) -> None:
    manifest = project(corpus)
    first = load_held_out(manifest, tokenizer, data_base=None)
    again = load_held_out(manifest, tokenizer, data_base=None)
    assert len(first.batches) == len(again.batches)
    for a, b in zip(first.batches, again.batches, strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)
    model = build_model(manifest)
    assert measure(model, first.batches, causal=False) == measure(
        model, again.batches, causal=False
    )


def test_a_short_held_out_text_gives_what_it_has(corpus: Path, tokenizer: TextTokenizer) -> None:
    everything = load_held_out(
        project(corpus, samples=MAX_EVALUATION_SAMPLES), tokenizer, data_base=None
    )
    assert 40 < everything.samples < MAX_EVALUATION_SAMPLES
    assert sum(b["input_ids"].size(0) for b in everything.batches) == everything.samples


def test_held_out_data_that_cannot_be_read_is_named(
    tmp_path: Path, tokenizer: TextTokenizer
) -> None:
    with pytest.raises(DataError, match=r"shard-00000\.jsonl\.gz"):
        load_held_out(project(tmp_path), tokenizer, data_base=None)
    (tmp_path / "held").mkdir()
    with gzip.open(tmp_path / "held" / "shard-00000.jsonl.gz", "wt") as out:
        out.write(json.dumps({"text": ""}) + "\n")
    with pytest.raises(DataError, match="hold no text"):
        load_held_out(project(tmp_path), tokenizer, data_base=None)
    with pytest.raises(DataError, match="no held-out data"):
        load_held_out(project(tmp_path, urls=()), tokenizer, data_base=None)


async def test_the_evaluator_measures_due_epochs_and_survives_failures(
    tmp_path: Path, corpus: Path, tokenizer: TextTokenizer, caplog: pytest.LogCaptureFixture
) -> None:
    manifest = project(tmp_path, every=2)  # no held-out shard there yet
    model = build_model(manifest)
    replica = TrainingBridge("replica")
    heard: list[PeerEvaluation] = []
    epoch = 0
    evaluator = HeldOutEvaluator(
        manifest,
        tokenizer=lambda: tokenizer,
        data_base=None,
        replica=replica,
        snapshot=lambda: (epoch, copy.deepcopy(model)),
        on_result=heard.append,
    )

    async def finish(done: int) -> None:
        nonlocal epoch
        epoch = done + 1
        evaluator.epoch_done(done)
        await asyncio.sleep(0)
        running = evaluator._running
        if running is not None:
            await running

    try:
        with caplog.at_level(logging.WARNING, "core.training.evaluation"):
            for done in range(4):  # due after epochs 1 and 3: both fail, one warning
                await finish(done)
        assert heard == []
        failures = [r for r in caplog.records if "held-out evaluation failed" in r.getMessage()]
        assert len(failures) == 1
        assert "shard-00000.jsonl.gz" in failures[0].getMessage()

        shutil.copytree(corpus / "held", tmp_path / "held")  # the shard appears
        await finish(4)
        assert heard == []  # epoch 4 is not due
        await finish(5)
        [result] = heard
        assert result.epoch == 6
        assert result.samples == 40
        assert result.tokens > 0
        held = load_held_out(manifest, tokenizer, data_base=None)
        direct = measure(model, held.batches, causal=False)
        assert (result.loss, result.accuracy) == (direct.loss, direct.accuracy)
    finally:
        await evaluator.aclose()
        await replica.aclose()


@pytest.mark.parametrize(
    ("lines", "key", "reason"),
    [
        ("samples = 0", "evaluation.samples", r"must be in \[1, 65536\]"),
        ("samples = 65537", "evaluation.samples", r"must be in \[1, 65536\]"),
        ("every = 0", "evaluation.every", r"must be in \[1,"),
        ('urls = ["ftp://example.org/held.jsonl"]', r"evaluation.urls\[0\]", "unsupported scheme"),
        ('urls = [" "]', r"evaluation.urls\[0\]", "must not be empty"),
        ('format = "csv"', "evaluation.format", "one of"),
        ("sample = 3", "evaluation.sample", "unknown key"),
    ],
)
def test_the_manifest_bounds_the_evaluation(lines: str, key: str, reason: str) -> None:
    demo = DEMO_MANIFEST.read_text()
    start = demo.index("[evaluation]")
    without = demo[:start] + demo[demo.index("[training]", start) :]
    urls = "" if lines.startswith("urls") else 'urls = ["held/shard-00000.jsonl.gz"]\n'
    with pytest.raises(ManifestError, match=f"{key}.*{reason}"):
        parse_manifest(f"{without}\n[evaluation]\n{urls}{lines}\n")


def test_the_demo_measures_its_held_out_modules() -> None:
    e = load_manifest(DEMO_MANIFEST).evaluation
    assert e.enabled
    assert e.urls == ("shards/held-out/shard-00000.jsonl.gz",)
