"""The ALBERT masked language model: shapes, loss masking, padding, sharing, tying, learning."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from core.models.albert import IGNORE_INDEX, AlbertConfig, AlbertMLM
from tests.models import ids

TINY = AlbertConfig(
    vocab_size=50,
    embedding_size=16,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    intermediate_size=64,
    max_position=16,
)


def make_model(config: AlbertConfig = TINY, seed: int = 0) -> AlbertMLM:
    torch.manual_seed(seed)
    return AlbertMLM(config).eval()


def random_ids(batch: int, time: int, vocab: int = TINY.vocab_size, seed: int = 1) -> torch.Tensor:
    return ids.random_ids(batch, time, vocab, seed)


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


def test_loss_ignores_unlabelled_positions() -> None:
    model = make_model()
    ids = random_ids(2, 8)
    labels = ids.clone()
    labels[:, ::2] = IGNORE_INDEX
    out = model(ids, labels=labels)
    assert out.loss is not None
    keep = labels != IGNORE_INDEX
    expected = F.cross_entropy(out.logits[keep], labels[keep])
    torch.testing.assert_close(out.loss, expected)

    # the ignored positions do count once they are labelled
    changed_targets = ids.clone()
    changed_targets[:, ::2] = (ids[:, ::2] + 7) % TINY.vocab_size
    assert model(ids, labels=changed_targets).loss != out.loss


def test_loss_without_labelled_positions_is_zero_with_a_gradient_path() -> None:
    model = make_model().train()
    ids = random_ids(2, 8)
    labels = torch.full_like(ids, IGNORE_INDEX)
    loss = model(ids, labels=labels).loss
    assert loss is not None
    assert loss.item() == 0.0
    assert loss.requires_grad
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads
    assert all(torch.isfinite(g).all() and not g.any() for g in grads)


def test_padding_does_not_affect_real_positions() -> None:
    model = make_model()
    ids = random_ids(2, 12)
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0
    mask[1, 3:] = 0
    other = ids.clone()
    other[0, 7:] = (other[0, 7:] + 11) % TINY.vocab_size
    other[1, 3:] = (other[1, 3:] + 5) % TINY.vocab_size
    a = model(ids, attention_mask=mask).logits
    b = model(other, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(a[real], b[real])
    # without the mask, the padded tokens do change the real positions
    c = model(other).logits
    assert not torch.allclose(model(ids).logits[real], c[real])


def test_an_all_padding_row_gives_finite_outputs() -> None:
    model = make_model()
    ids = random_ids(2, 6)
    mask = torch.ones_like(ids)
    mask[1] = 0
    logits = model(ids, attention_mask=mask).logits
    assert torch.isfinite(logits).all()


def test_layers_share_weights() -> None:
    shallow = make_model(AlbertConfig(**{**TINY.__dict__, "num_layers": 1}))
    deep = make_model(AlbertConfig(**{**TINY.__dict__, "num_layers": 12}))
    assert shallow.num_parameters() == deep.num_parameters()
    # depth is real: the same weights applied more often give different outputs
    deep.load_state_dict(shallow.state_dict())
    ids = random_ids(1, 5)
    assert not torch.allclose(shallow(ids).logits, deep(ids).logits)


def test_decoder_is_tied_to_the_token_embedding() -> None:
    model = make_model()
    assert model.decoder.weight is model.token_embedding.weight
    names = {name for name, _ in model.named_parameters()}
    assert "decoder.bias" in names
    assert "decoder.weight" not in names  # counted once, under the embedding
    expected = sum(p.numel() for p in set(model.parameters()))
    assert model.num_parameters() == expected


def test_initialisation() -> None:
    model = make_model(AlbertConfig())
    assert abs(model.token_embedding.weight.std().item() - 0.02) < 0.002
    assert not model.decoder.bias.any()
    assert not model.layer.ffn_in.bias.any()
    assert (model.layer.ffn_norm.weight == 1).all()


def test_deterministic_given_the_seed() -> None:
    a, b, c = make_model(seed=3), make_model(seed=3), make_model(seed=4)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
    assert not all(torch.equal(x, z) for x, z in zip(a.parameters(), c.parameters(), strict=True))


def test_dropout_is_active_only_in_training() -> None:
    model = make_model(AlbertConfig(**{**TINY.__dict__, "dropout": 0.3}))
    ids = random_ids(2, 8)
    torch.testing.assert_close(model(ids).logits, model(ids).logits)
    model.train()
    assert not torch.allclose(model(ids).logits, model(ids).logits)


@pytest.mark.timeout(
    600
)  # CPU-bound: a busy machine multiplies its time (the limit is a hang guard)
def test_overfits_a_small_batch() -> None:
    model = make_model().train()
    ids = random_ids(4, 12, seed=5)
    labels = ids.clone()
    labels[:, 1::3] = IGNORE_INDEX
    inputs = ids.clone()
    inputs[:, ::3] = 0  # a stand-in [MASK] token: the model must recall what was there
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(100):
        loss = model(inputs, labels=labels).loss
        assert loss is not None
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses[::10]


def test_rejects_sequences_longer_than_max_position() -> None:
    model = make_model()
    with pytest.raises(ValueError, match="max_position"):
        model(random_ids(1, TINY.max_position + 1))
    with pytest.raises(ValueError, match="batch, time"):
        model(torch.zeros(4, dtype=torch.long))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"vocab_size": 0}, "vocab_size must be a positive integer"),
        ({"embedding_size": -1}, "embedding_size"),
        ({"hidden_size": 0}, "hidden_size"),
        ({"num_layers": 0}, "num_layers"),
        ({"num_heads": 0}, "num_heads"),
        ({"intermediate_size": 0}, "intermediate_size"),
        ({"max_position": 0}, "max_position"),
        ({"num_heads": 3}, "divisible by num_heads"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
        ({"dropout": -0.1}, "dropout"),
        ({"layer_norm_eps": 0.0}, "layer_norm_eps"),
        ({"num_layers": 2.5}, "num_layers"),
    ],
)
def test_config_validation(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AlbertConfig(**changes)  # type: ignore[arg-type]
