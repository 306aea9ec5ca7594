"""Expert uids on a grid: canonical spelling, bounds, prefixes; the structured gate's additive scores."""

from __future__ import annotations

import pytest
import torch

from core.moe.client.gating import GatingInputError, StructuredGating
from core.moe.grid import ExpertGrid, GridError

GRID = ExpertGrid("ffn", (4, 20))


def test_uid_round_trip_and_prefixes() -> None:
    assert GRID.uid((3, 17)) == "ffn.3.17"
    assert GRID.parse("ffn.3.17") == (3, 17)
    assert GRID.parse_prefix("ffn") == ()
    assert GRID.parse_prefix("ffn.3") == (3,)
    assert GRID.prefixes("ffn.3.17") == ["ffn", "ffn.3"]
    assert GRID.depth == 2
    assert GRID.size == 80
    uids = list(GRID.all_uids())
    assert len(uids) == len(set(uids)) == 80
    assert [GRID.parse(uid) for uid in uids] == sorted(GRID.parse(uid) for uid in uids)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("mlp.3.17", "not on grid"),
        ("ffnx.3.17", "not on grid"),
        ("ffn.4.0", "outside dimension 0"),
        ("ffn.3.20", "outside dimension 1"),
        ("ffn.3", "has 1 indices"),
        ("ffn", "has 0 indices"),
        ("ffn.3.17.1", "has 3 indices"),
        ("ffn.03.1", "not a plain decimal"),
        ("ffn.+3.1", "not a plain decimal"),
        ("ffn.-1.1", "not a plain decimal"),
        ("ffn. 3.1", "not a plain decimal"),
        ("ffn.3.", "not a plain decimal"),
        ("ffn..3", "not a plain decimal"),
        ("ffn.3.1e1", "not a plain decimal"),
        ("ffn.٣.1", "not a plain decimal"),  # an Arabic-Indic digit: int() would accept it
        ("ffn." + "1" * 300, "characters"),
    ],
)
def test_bad_uids_are_refused_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(GridError, match=why):
        GRID.parse(text)


def test_bad_uid_types_and_grids() -> None:
    with pytest.raises(GridError, match="text"):
        GRID.parse(17)  # type: ignore[arg-type]
    with pytest.raises(GridError, match="outside"):
        GRID.uid((3, -1))
    with pytest.raises(GridError, match="2 indices"):
        GRID.uid((3,))
    with pytest.raises(GridError, match="must be an int"):
        GRID.key((True,))
    for prefix in ("", "a.b", "1ffn", "f f", "x" * 65):
        with pytest.raises(GridError, match="prefix"):
            ExpertGrid(prefix, (2,))
    for shape in ((), (0,), (3, -1), (2.0,)):
        with pytest.raises(GridError):
            ExpertGrid("ffn", shape)  # type: ignore[arg-type]


def test_gate_scores_are_sums_of_coordinate_scores() -> None:
    torch.manual_seed(0)
    gate = StructuredGating(8, (4, 5, 3))
    inputs = torch.randn(6, 8)
    dims = gate(inputs)
    assert [tuple(d.shape) for d in dims] == [(6, 4), (6, 5), (6, 3)]
    coords = torch.tensor([[[1, 2, 0], [3, 4, 2]]] * 6)
    scores = gate.score(dims, coords)
    expected = dims[0][:, 1] + dims[1][:, 2] + dims[2][:, 0]
    assert torch.allclose(scores[:, 0], expected)
    scores.sum().backward()  # the chosen experts' logits train the gate
    assert all(p.grad is not None for p in gate.parameters())


def test_gate_refuses_bad_shapes() -> None:
    gate = StructuredGating(8, (4, 5))
    with pytest.raises(GatingInputError, match=r"\[batch, 8\]"):
        gate(torch.randn(6, 7))
    with pytest.raises(GatingInputError, match="floating"):
        gate(torch.ones(6, 8, dtype=torch.long))
    dims = gate(torch.randn(2, 8))
    with pytest.raises(GatingInputError, match="outside"):
        gate.score(dims, torch.tensor([[[4, 0]], [[0, 0]]]))
    with pytest.raises(GatingInputError, match="int64"):
        gate.score(dims, torch.zeros(2, 1, 3, dtype=torch.long))
