"""The digits loader: the bundled file, a fixed split, scaled pixels, endless batches, bad files."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch

from core.moe.client.digits import DigitsDataError, digit_batches, load_digits


def test_the_bundled_digits_load_with_a_fixed_split() -> None:
    digits = load_digits()
    assert len(digits.train_x) + len(digits.test_x) == 1797
    assert len(digits.test_x) == round(1797 * 0.2)
    assert digits.train_x.shape[1] == 64
    assert digits.train_x.dtype == torch.float32
    assert float(digits.train_x.min()) == 0.0
    assert float(digits.train_x.max()) == 1.0
    assert sorted(set(digits.train_y.tolist())) == list(range(10))
    again = load_digits()
    assert torch.equal(again.test_x, digits.test_x)
    assert torch.equal(again.test_y, digits.test_y)
    other = load_digits(seed=1)
    assert not torch.equal(other.test_x, digits.test_x)
    # the split is a partition: no training row is also a test row
    train = {tuple(row) for row in digits.train_x.tolist()}
    overlap = sum(tuple(row) in train for row in digits.test_x.tolist())
    assert overlap < 10  # only images that happen to be identical pixel for pixel, if any


def test_batches_go_on_for_ever_in_seeded_order() -> None:
    x = torch.arange(10.0).reshape(10, 1)
    y = torch.arange(10)
    batches = digit_batches(x, y, 4, seed=3)
    firsts = [next(batches) for _ in range(5)]  # two per pass over 10 rows, then a new pass
    assert all(bx.shape == (4, 1) and torch.equal(bx[:, 0].long(), by) for bx, by in firsts)
    assert len(set(firsts[0][1].tolist()) | set(firsts[1][1].tolist())) == 8
    same = digit_batches(x, y, 4, seed=3)
    assert all(torch.equal(next(same)[1], by) for _, by in firsts)
    with pytest.raises(DigitsDataError, match="batch of 11"):
        next(digit_batches(x, y, 11))


def test_a_bad_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.csv.gz"
    with pytest.raises(DigitsDataError, match="cannot read"):
        load_digits(missing)
    short = tmp_path / "short.csv.gz"
    with gzip.open(short, "wt") as file:
        file.write("1,2,3\n")
    with pytest.raises(DigitsDataError, match="64 pixels and a label"):
        load_digits(short)
    label = tmp_path / "label.csv.gz"
    with gzip.open(label, "wt") as file:
        file.write(",".join(["0"] * 64 + ["12"]) + "\n")
    with pytest.raises(DigitsDataError, match="labels outside"):
        load_digits(label)
