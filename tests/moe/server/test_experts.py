"""Expert architectures: built the same on every server, bad descriptions refused with a reason."""

from __future__ import annotations

import pytest
import torch

from core.moe.server.experts import ExpertSpec, ExpertSpecError, FeedForwardExpert


def test_the_same_uid_gives_the_same_weights_and_leaves_the_callers_random_stream_alone() -> None:
    spec = ExpertSpec(kind="ffn", hidden=8)
    torch.manual_seed(5)
    before = torch.rand(3)
    torch.manual_seed(5)
    a = spec.module("ffn.1.2")
    after = torch.rand(3)
    b = spec.module("ffn.1.2")
    c = spec.module("ffn.1.3")
    torch.testing.assert_close(before, after)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb)
    assert not torch.equal(next(a.parameters()), next(c.parameters()))


def test_ffn_is_a_residual_block_with_a_four_times_wider_inner_layer() -> None:
    expert = ExpertSpec(kind="ffn", hidden=6).module("ffn.0")
    assert isinstance(expert, FeedForwardExpert)
    assert expert.inner.weight.shape == (24, 6)
    x = torch.randn(5, 6)
    h = torch.nn.functional.gelu(expert.inner(x), approximate="tanh")
    expected = torch.nn.functional.layer_norm(
        x + expert.outer(h), (6,), expert.norm.weight, expert.norm.bias, eps=1e-12
    )
    torch.testing.assert_close(expert(x), expected)


def test_backend_takes_and_gives_hidden_wide_rows() -> None:
    backend = ExpertSpec(kind="linear", hidden=4, optimizer="sgd", lr=0.1, max_batch=3).backend(
        "ffn.0.0"
    )
    info = backend.info
    assert (info.inputs, info.outputs, info.max_batch) == ([[4]], [[4]], 3)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("kind", "moe", "kind"),
        ("hidden", 0, "width"),
        ("optimizer", "lion", "optimizer"),
        ("lr", 0.0, "learning rate"),
        ("max_batch", 0, "max_batch"),
    ],
)
def test_bad_descriptions_are_refused_with_a_reason(field: str, value: object, says: str) -> None:
    with pytest.raises(ExpertSpecError, match=says):
        ExpertSpec(**{field: value})  # type: ignore[arg-type]
