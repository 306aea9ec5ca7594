"""The Llama-shaped causal language model: its configuration's rules, causality, padding, tying,
the shifted loss, learning, gradient checkpointing, and equality with transformers' model."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from core.models.albert import IGNORE_INDEX
from core.models.llama import DecoderLayer, LlamaCLM, LlamaConfig
from tests.models import ids

TINY = LlamaConfig(
    vocab_size=50,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    intermediate_size=64,
    max_position=16,
)


def make_model(config: LlamaConfig = TINY, seed: int = 0) -> LlamaCLM:
    torch.manual_seed(seed)
    return LlamaCLM(config).eval()


def random_ids(batch: int, time: int, vocab: int = TINY.vocab_size, seed: int = 1) -> torch.Tensor:
    return ids.random_ids(batch, time, vocab, seed)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"vocab_size": 0}, "vocab_size must be a positive integer"),
        ({"num_layers": True}, "num_layers must be a positive integer"),
        ({"num_kv_heads": 0}, "num_kv_heads must be a positive integer"),
        ({"hidden_size": 30}, r"hidden_size \(30\) must be divisible by num_heads \(4\)"),
        ({"hidden_size": 12}, r"hidden_size / num_heads \(3\) must be even"),
        ({"num_kv_heads": 3}, r"num_heads \(4\) must be divisible by num_kv_heads \(3\)"),
        ({"rope_theta": 0.0}, "rope_theta must be a positive number"),
        ({"rms_norm_eps": -1e-6}, "rms_norm_eps must be a positive number"),
        ({"tie_embeddings": 1}, "tie_embeddings must be True or False"),
        ({"gradient_checkpointing": "yes"}, "gradient_checkpointing must be True or False"),
    ],
)
def test_the_configuration_refuses_shapes_that_cannot_be_built(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(TINY, **changes)


def test_output_shapes_and_loss() -> None:
    model = make_model()
    ids = random_ids(3, 10)
    out = model(ids)
    assert out.logits.shape == (3, 10, TINY.vocab_size)
    assert out.loss is None
    out = model(ids, labels=ids)
    assert out.loss is not None
    assert out.loss.shape == ()
    # near-uniform scores at init: the loss is close to log(vocab)
    assert abs(out.loss.item() - torch.log(torch.tensor(50.0)).item()) < 0.5
    with pytest.raises(ValueError, match="exceeds max_position 16"):
        model(random_ids(1, 17))


def test_the_loss_predicts_the_next_label_and_ignores_unlabelled_ones() -> None:
    model = make_model()
    ids = random_ids(2, 9)
    labels = ids.clone()
    labels[0, 5:] = IGNORE_INDEX
    out = model(ids, labels=labels)
    assert out.loss is not None
    logits, targets = out.logits[:, :-1], labels[:, 1:]  # position t predicts token t + 1
    keep = targets != IGNORE_INDEX
    torch.testing.assert_close(out.loss, F.cross_entropy(logits[keep], targets[keep]))
    # the first label is never a target: nothing comes before it
    first = labels.clone()
    first[:, 0] = (first[:, 0] + 1) % TINY.vocab_size
    torch.testing.assert_close(model(ids, labels=first).loss, out.loss)


def test_logits_depend_on_earlier_tokens_only() -> None:
    model = make_model()
    ids = random_ids(2, 12)
    for t in (0, 5, 10):
        changed = ids.clone()
        changed[:, t + 1] = (changed[:, t + 1] + 7) % TINY.vocab_size
        a, b = model(ids).logits, model(changed).logits
        torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1])
        assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])


def test_padded_keys_are_not_attended() -> None:
    model = make_model()
    ids = random_ids(2, 12)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # padding before the text: the causal mask alone would let it be seen
    mask[1, 9:] = 0
    other = ids.clone()
    other[0, :4] = (other[0, :4] + 11) % TINY.vocab_size
    other[1, 9:] = (other[1, 9:] + 5) % TINY.vocab_size
    a = model(ids, attention_mask=mask).logits
    b = model(other, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(a[real], b[real])
    # without the mask, the padding before the text does change it
    assert not torch.allclose(model(ids).logits[0, 4:], model(other).logits[0, 4:])
    # a mask of ones is the causal attention alone
    torch.testing.assert_close(
        model(ids, attention_mask=torch.ones_like(ids)).logits, model(ids).logits
    )


def test_an_all_padding_row_gives_finite_outputs() -> None:
    model = make_model()
    ids = random_ids(2, 6)
    mask = torch.ones_like(ids)
    mask[1] = 0
    assert torch.isfinite(model(ids, attention_mask=mask).logits).all()


def test_a_tied_read_out_is_the_embedding_and_counted_once() -> None:
    tied = make_model()
    untied = make_model(dataclasses.replace(TINY, tie_embeddings=False))
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight
    extra = TINY.vocab_size * TINY.hidden_size
    assert untied.num_parameters() == tied.num_parameters() + extra
    for model in (tied, untied):
        assert model.num_parameters() == sum(p.numel() for p in set(model.parameters()))
    assert "lm_head.weight" not in dict(tied.named_parameters())  # under the embedding's name
    assert "lm_head.weight" in tied.state_dict()  # but saved under both, as transformers expects


def test_grouped_query_attention_shrinks_the_key_and_value_projections() -> None:
    full = make_model(dataclasses.replace(TINY, num_kv_heads=4))
    shared = make_model(dataclasses.replace(TINY, num_kv_heads=1))
    layer = shared.model.layers[0]
    assert isinstance(layer, DecoderLayer)
    attention = layer.self_attn
    assert attention.k_proj.weight.shape == attention.v_proj.weight.shape == (8, 32)
    per_layer = 2 * 32 * (32 - 8)  # k and v: 4 heads of 8 values, then 1
    assert full.num_parameters() - shared.num_parameters() == TINY.num_layers * per_layer
    assert torch.isfinite(shared(random_ids(2, 8)).logits).all()


def test_initialisation_and_names() -> None:
    model = make_model(LlamaConfig())
    first, second = model.model.layers[0], model.model.layers[1]
    assert isinstance(first, DecoderLayer)
    assert isinstance(second, DecoderLayer)
    assert abs(model.model.embed_tokens.weight.std().item() - 0.02) < 0.002
    assert abs(first.mlp.up_proj.weight.std().item() - 0.02) < 0.002
    assert bool((model.model.norm.weight == 1).all())
    assert bool((second.input_layernorm.weight == 1).all())
    norms = [name for name, p in model.named_parameters() if p.dim() == 1]
    assert len(norms) == 2 * model.config.num_layers + 1  # two per layer and the final one
    assert all(name.endswith("norm.weight") for name in norms)
    assert not any("bias" in name for name in model.state_dict())


def test_deterministic_given_the_seed() -> None:
    a, b, c = make_model(seed=3), make_model(seed=3), make_model(seed=4)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
    assert not all(torch.equal(x, z) for x, z in zip(a.parameters(), c.parameters(), strict=True))


@pytest.mark.timeout(600)  # CPU-bound: a busy machine multiplies its time (a hang guard)
def test_learns_a_small_repeated_text() -> None:
    model = make_model().train()
    text = torch.tensor([[3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32, 38, 4, 6, 26]]).repeat(4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = model(text, labels=text).loss
        assert loss is not None
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.25 * losses[0], losses


def test_gradient_checkpointing_gives_the_same_loss_and_gradients() -> None:
    ids = random_ids(2, 12)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    labels = ids.masked_fill(mask == 0, IGNORE_INDEX)
    results = []
    for recompute in (False, True):
        model = make_model(dataclasses.replace(TINY, gradient_checkpointing=recompute)).train()
        loss = model(ids, mask, labels).loss
        assert loss is not None
        loss.backward()
        grads = {name: p.grad for name, p in model.named_parameters()}
        assert all(g is not None for g in grads.values())
        results.append((loss.detach(), grads))
    (loss_a, grads_a), (loss_b, grads_b) = results
    torch.testing.assert_close(loss_a, loss_b)
    for name, grad in grads_a.items():
        torch.testing.assert_close(grad, grads_b[name], msg=name)


@pytest.mark.parametrize("tied", [True, False])
def test_the_state_dict_loads_into_transformers_with_equal_logits(tied: bool) -> None:
    transformers = pytest.importorskip("transformers")
    config = dataclasses.replace(
        TINY, vocab_size=97, hidden_size=64, num_layers=3, max_position=32, tie_embeddings=tied
    )
    ours = make_model(config)
    theirs = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            num_hidden_layers=config.num_layers,
            num_attention_heads=config.num_heads,
            num_key_value_heads=config.num_kv_heads,
            intermediate_size=config.intermediate_size,
            max_position_embeddings=config.max_position,
            rope_theta=config.rope_theta,
            rms_norm_eps=config.rms_norm_eps,
            hidden_act="silu",
            attention_bias=False,
            mlp_bias=False,
            tie_word_embeddings=tied,
        )
    ).eval()
    state = ours.state_dict()
    assert set(state) == set(theirs.state_dict())  # the same names, one to one
    theirs.load_state_dict(state, strict=True)
    if tied:
        assert theirs.lm_head.weight is theirs.model.embed_tokens.weight
    ids = random_ids(3, 20, vocab=config.vocab_size, seed=5)
    with torch.no_grad():
        expected = theirs(ids).logits
        got = ours(ids).logits
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        torch.testing.assert_close(
            ours(ids, labels=ids).loss, theirs(ids, labels=ids).loss, rtol=0, atol=1e-5
        )
