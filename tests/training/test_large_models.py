"""Real-size models: the ALBERT-large and -xxlarge manifests, and gradient checkpointing.

The manifests' models are built on the ``meta`` device (shapes without memory): 206M parameters
would take 0.8 GB and seconds to initialise. Checkpointing is checked on a tiny ALBERT: the same
loss and gradients as without it, fewer tensors kept for backward, and the shared layer really run
again in backward.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from core.models.albert import AlbertConfig, AlbertMLM
from core.project import ManifestError, ModelSection, load_manifest
from core.training.peer.recipe import build_model
from core.util.process.resources import resource_path
from core.worker.bridge import TrainingBridge
from core.worker.errors import Interrupted

TINY = AlbertConfig(
    vocab_size=50,
    embedding_size=16,
    hidden_size=32,
    num_layers=3,
    num_heads=4,
    intermediate_size=64,
    max_position=16,
    dropout=0.1,  # checkpointing must replay the forward pass's dropout masks
)

# name: (parameters as the manifest's comment states them, the shape's nominal range)
LARGE_MODELS = {
    "albert-large": (17_053_568, (16_000_000, 19_000_000)),
    "albert-xxlarge": (206_368_688, (200_000_000, 225_000_000)),
}


def manifest_path(name: str) -> Path:
    return resource_path(f"{name}/project.toml")


@pytest.mark.parametrize("name", sorted(LARGE_MODELS))
def test_the_large_manifests_build_models_of_the_stated_size(name: str) -> None:
    manifest = load_manifest(manifest_path(name))
    with torch.device("meta"):
        model = build_model(manifest)
    count, (low, high) = LARGE_MODELS[name]
    assert model.num_parameters() == count
    assert low <= count <= high
    assert f"{count:,}" in manifest_path(name).read_text()  # the comment says the true count
    assert model.config.gradient_checkpointing
    assert model.config.max_position >= manifest.data.seq_len == 512
    assert manifest.data.tokenizer_vocab_size == manifest.model.vocab_size
    assert manifest.training.target_batch_size == 4096
    assert manifest.training.precision == "auto"


def test_the_xxlarge_manifest_keeps_8bit_states_on_the_host() -> None:
    training = load_manifest(manifest_path("albert-xxlarge")).training
    assert (training.optimizer_states, training.offload_optimizer) == ("8bit", True)


def test_the_manifest_setting_reaches_the_model() -> None:
    manifest = load_manifest(resource_path("demo/project.toml"))
    assert not manifest.model.gradient_checkpointing  # the default
    on = replace(manifest, model=replace(manifest.model, gradient_checkpointing=True))
    assert build_model(on).config.gradient_checkpointing
    assert not build_model(manifest).config.gradient_checkpointing


@pytest.mark.parametrize("value", [1, "true", None])
def test_gradient_checkpointing_must_be_a_boolean(value: object) -> None:
    with pytest.raises(ManifestError, match=r"model\.gradient_checkpointing: expected boolean"):
        ModelSection(gradient_checkpointing=value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gradient_checkpointing must be True or False"):
        AlbertConfig(gradient_checkpointing=value)  # type: ignore[arg-type]


def _model(checkpointing: bool) -> AlbertMLM:
    torch.manual_seed(0)
    config = AlbertConfig(**{**TINY.__dict__, "gradient_checkpointing": checkpointing})
    return AlbertMLM(config).train()


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, TINY.vocab_size, (4, 12), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    return ids, mask, ids.clone()


def _layer_calls(model: AlbertMLM) -> list[int]:
    calls = [0]

    def count(_module: torch.nn.Module, _inputs: object) -> None:
        calls[0] += 1

    model.layer.register_forward_pre_hook(count)
    return calls


def test_checkpointing_gives_the_same_loss_and_gradients() -> None:
    results = []
    for checkpointing in (False, True):
        model = _model(checkpointing)
        torch.manual_seed(7)  # the same dropout masks in both runs
        loss = model(*_batch()).loss
        assert loss is not None
        loss.backward()
        grads = {n: p.grad for n, p in model.named_parameters()}
        results.append((loss.detach(), grads))
    (plain_loss, plain), (loss, grads) = results
    torch.testing.assert_close(loss, plain_loss, rtol=0, atol=0)
    for name, grad in plain.items():
        other = grads[name]
        assert grad is not None, name
        assert other is not None, name
        torch.testing.assert_close(other, grad, rtol=1e-5, atol=1e-7, msg=name)


def test_checkpointing_runs_the_shared_layer_again_in_backward() -> None:
    model = _model(True)
    calls = _layer_calls(model)
    loss = model(*_batch()).loss
    assert loss is not None
    assert calls[0] == TINY.num_layers
    loss.backward()
    assert calls[0] == 2 * TINY.num_layers  # each application recomputed once

    plain = _model(False)
    plain_calls = _layer_calls(plain)
    plain_loss = plain(*_batch()).loss
    assert plain_loss is not None
    plain_loss.backward()
    assert plain_calls[0] == TINY.num_layers


def test_checkpointing_only_while_training_with_gradients() -> None:
    model = _model(True)
    calls = _layer_calls(model)
    with torch.no_grad():
        model(*_batch())
    assert calls[0] == TINY.num_layers
    model.eval()
    loss = model(*_batch()).loss
    assert loss is not None
    loss.backward()  # in eval mode the activations were kept: no recomputation
    assert calls[0] == 2 * TINY.num_layers


def _saved_bytes(model: AlbertMLM) -> int:
    """Bytes of the tensors autograd keeps for backward (weights excluded: they exist anyway)."""
    weights = {p.data_ptr() for p in model.parameters()}
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        if tensor.data_ptr() not in weights:
            total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(*_batch())
    return total


def test_checkpointing_keeps_less_for_backward() -> None:
    deep = {**TINY.__dict__, "num_layers": 8}
    kept = {}
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = AlbertMLM(AlbertConfig(**{**deep, "gradient_checkpointing": checkpointing}))
        kept[checkpointing] = _saved_bytes(model.train())
    # per application: only the layer's input instead of every intermediate of the layer
    assert kept[True] < kept[False] / 2, kept


def test_a_pause_interrupts_the_recomputation_in_backward() -> None:
    """The bridge's forward hooks fire in the recomputed forward too (and ``Interrupted`` comes
    out of backward as itself), so a pause still stops a backward pass within one layer."""
    for checkpointing in (False, True):
        model = _model(checkpointing)
        bridge = TrainingBridge("test-checkpointing")
        # only the layer's forward is watched: what stops backward here is the recomputation
        handle = model.layer.register_forward_pre_hook(lambda _m, _i, b=bridge: b.check())
        try:
            loss = model(*_batch()).loss
            assert loss is not None
            bridge.interrupt()
            if checkpointing:
                with pytest.raises(Interrupted):
                    loss.backward()
            else:
                loss.backward()  # nothing is recomputed: nothing checks
        finally:
            handle.remove()
            bridge.close()
