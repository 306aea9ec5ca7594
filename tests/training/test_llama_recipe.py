"""The recipe for a ``llama-clm`` project: the model from its manifest, causal batches, its
presets' sizes, 8-bit and offloaded optimizer states, and DiLoCo rounds, as for any kind."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from core.data import load_tokenizer
from core.models.albert import IGNORE_INDEX, AlbertMLM
from core.models.llama import LlamaCLM
from core.optim.moments import MomentOptimizer
from core.project import Manifest, load_manifest
from core.training.diloco.state import DilocoState
from core.training.peer.recipe import (
    build_model,
    data_stream,
    mlm_loss,
    training_state,
)
from core.training.state import TrainingState

ROOT = Path(__file__).resolve().parents[2]
LLAMA_DEMO = ROOT / "resources" / "llama-demo" / "project.toml"
LLAMA_1B = ROOT / "resources" / "llama-1b" / "project.toml"
DEMO = ROOT / "resources" / "demo" / "project.toml"


def small(manifest: Manifest) -> Manifest:
    """``manifest`` with a smaller model of the same kind: the recipe is what is tested here."""
    model = dataclasses.replace(
        manifest.model, vocab_size=512, embedding_size=64, hidden_size=64, num_layers=2,
        intermediate_size=128,
    )  # fmt: skip
    data = dataclasses.replace(manifest.data, tokenizer_vocab_size=512)
    return dataclasses.replace(manifest, model=model, data=data)


def batches(manifest: Manifest, seed: int, count: int) -> list[dict[str, torch.Tensor]]:
    """``count`` batches of 4 random sequences of 32 tokens, labelled for the next token."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, manifest.model.vocab_size, (count, 4, 32), generator=generator)
    return [
        {"input_ids": b, "attention_mask": torch.ones_like(b), "labels": b.clone()} for b in ids
    ]


def test_the_manifest_builds_its_llama_seeded_alike_on_every_peer() -> None:
    manifest = load_manifest(LLAMA_DEMO)
    a, b = build_model(manifest), build_model(manifest)
    assert isinstance(a, LlamaCLM)
    c = a.config
    m = manifest.model
    assert (c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads) == (128, 4, 4, 2)
    assert (c.intermediate_size, c.rope_theta, c.tie_embeddings) == (352, 10000.0, True)
    assert (c.vocab_size, c.max_position) == (m.vocab_size, m.max_position)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
    # num_kv_heads = 0 means one key/value head per query head
    section = dataclasses.replace(manifest.model, num_kv_heads=0)
    full = build_model(dataclasses.replace(manifest, model=section))
    assert isinstance(full, LlamaCLM)
    assert full.config.num_kv_heads == full.config.num_heads
    assert isinstance(build_model(load_manifest(DEMO)), AlbertMLM)


def test_the_billion_parameter_preset_is_the_size_its_comment_says() -> None:
    manifest = load_manifest(LLAMA_1B)
    with torch.device("meta"):  # the shapes without the 4 GB
        model = build_model(manifest)
    assert isinstance(model, LlamaCLM)
    assert model.num_parameters() == 1_038_682_112
    assert model.config.gradient_checkpointing
    t = manifest.training
    assert (t.optimizer_states, t.offload_optimizer) == ("8bit", True)
    assert f"{model.num_parameters():,}" in LLAMA_1B.read_text()


def test_the_data_stream_of_a_causal_project_is_unmasked(demo_data: Path) -> None:
    tokenizer = load_tokenizer(demo_data / "tokenizer.json")
    llama = load_manifest(LLAMA_DEMO)
    (batch,) = itertools.islice(data_stream(llama, tokenizer, data_base=str(demo_data), seed=1), 1)
    assert batch["input_ids"].shape == (llama.training.microbatch_size, llama.data.seq_len)
    real = batch["attention_mask"].bool()
    assert torch.equal(batch["labels"][real], batch["input_ids"][real])
    assert (batch["labels"][~real] == IGNORE_INDEX).all()
    assert tokenizer.mask_id not in batch["input_ids"]
    model = build_model(llama)
    with torch.no_grad():
        loss = float(mlm_loss(model, batch))
    assert loss == pytest.approx(np.log(llama.model.vocab_size), abs=0.5)
    # the masked demo's stream predicts a few masked tokens only
    albert = load_manifest(DEMO)
    (masked,) = itertools.islice(
        data_stream(albert, tokenizer, data_base=str(demo_data), seed=1), 1
    )
    assert (masked["labels"] != IGNORE_INDEX).float().mean() < 0.3


@pytest.mark.parametrize("optimizer", ["lamb", "adamw"])
def test_8bit_offloaded_states_train_it_as_32bit_ones_do(optimizer: str) -> None:
    manifest = small(load_manifest(LLAMA_DEMO)).with_training(
        optimizer=optimizer, lr=0.01, warmup_steps=0
    )
    (batch,) = batches(manifest, seed=0, count=1)
    plain = train(manifest, batch)[0]
    compact = manifest.with_training(optimizer_states="8bit", offload_optimizer=True)
    curve, state = train(compact, batch)
    assert all(b < a for a, b in itertools.pairwise(curve)), curve
    assert curve[-1] < curve[0] - 0.1, curve
    np.testing.assert_allclose(curve, plain, rtol=0.01)
    assert all(torch.isfinite(p).all() for p in state.parameters)
    # the embedding (tied to the read-out) keeps 8-bit moments on the host
    assert isinstance(state.optimizer, MomentOptimizer)
    assert isinstance(state.model, LlamaCLM)
    moments = state.optimizer.state[state.model.model.embed_tokens.weight]
    assert "exp_avg_codes" in moments
    assert all(t.device.type == "cpu" for t in moments.values() if isinstance(t, torch.Tensor))
    # a peer that joins takes the whole state, 8-bit codes included
    epoch, _, arrays = state.snapshot()
    fresh = training_state(build_model(compact), compact)
    fresh.load(epoch, arrays)
    for mine, theirs in zip(state.averaged_tensors(), fresh.averaged_tensors(), strict=True):
        assert torch.equal(mine, theirs)


def train(manifest: Manifest, batch: dict[str, torch.Tensor]) -> tuple[list[float], TrainingState]:
    """Six steps of the manifest's optimizer on one batch: the losses, and the state after."""
    model = build_model(manifest)
    state = training_state(model, manifest)
    losses = []
    for _ in range(6):
        loss = mlm_loss(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(state.parameters, 1.0)
        state.optimizer.step()
        state.optimizer.zero_grad()
        losses.append(loss.item())
    return losses, state


def test_diloco_rounds_train_it_and_keep_the_peers_anchors_identical() -> None:
    # tests/training/diloco/test_convergence.py's by-hand rounds, on two peers of a diloco
    # llama-demo: each takes inner steps alone, then both land the mean of their pseudo-gradients
    manifest = small(load_manifest(LLAMA_DEMO)).with_training(
        mode="diloco", overlap=False, lr=0.01, warmup_steps=0
    )
    t = manifest.training
    peers = []
    for _ in range(2):
        model = build_model(manifest)
        peers.append(
            DilocoState(
                training_state(model, manifest),
                outer_lr=t.outer_lr,
                outer_momentum=t.outer_momentum,
                overlap=t.overlap,
                sparse=manifest.averaging.round_codec().sparse,
                clip_norm=t.clip_norm or None,
            )
        )
    data = [batches(manifest, seed=10 + i, count=2) for i in range(2)]
    held_out = [b for peer in data for b in peer]
    start = held_out_loss(peers[0].state, held_out)
    for r in range(3):
        for peer, mine in zip(peers, data, strict=True):
            for step in range(4):
                mlm_loss(peer.state.model, mine[step % len(mine)]).backward()
                assert peer.inner_step()
        deltas = [peer.end_round() for peer in peers]
        mean = [np.mean(np.stack(parts), axis=0) for parts in zip(*deltas, strict=True)]
        for peer in peers:
            peer.land([m.copy() for m in mean], peer.feedback(), [])
        assert peers[0].anchor_digest() == peers[1].anchor_digest(), f"round {r}"
        for a, b in zip(peers[0].state.parameters, peers[1].state.parameters, strict=True):
            assert torch.equal(a, b)
    end = held_out_loss(peers[0].state, held_out)
    assert end < start - 0.5, (start, end)


def held_out_loss(state: TrainingState, data: list[dict[str, torch.Tensor]]) -> float:
    with torch.no_grad():
        return sum(float(mlm_loss(state.model, b)) for b in data) / len(data)
