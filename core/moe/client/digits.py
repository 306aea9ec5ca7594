"""The handwritten digits for the DMoE demo and experiments (``resources/digits``, see its SOURCE.md).

1,797 images of 8x8 pixels with values 0-16, one per row of a gzipped CSV with the label (0-9)
last. Small enough to load in milliseconds and to train on a laptop's CPU, real enough that a
falling loss means the mixture learns. The split into training and test rows is a seeded
permutation, so every peer of an experiment holds out the same rows; pixels are scaled to [0, 1].
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from core.util.errors import BarnraiseError
from core.util.process.resources import resource_path

PIXELS = 64
CLASSES = 10
MAX_PIXEL = 16.0


class DigitsDataError(BarnraiseError):
    """The digits file is missing or does not hold 8x8 images with labels."""


@dataclass(frozen=True, slots=True)
class Digits:
    """Training and test rows: pixels ``[n, 64]`` as float32 in [0, 1], labels ``[n]`` as int64."""

    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor


def load_digits(path: Path | None = None, *, test_fraction: float = 0.2, seed: int = 0) -> Digits:
    """Read the digits (the bundled file unless ``path``) and split them the same way every time."""
    if not 0 <= test_fraction < 1:
        raise DigitsDataError(f"the test fraction must be in [0, 1), not {test_fraction}")
    path = path or resource_path("digits/digits.csv.gz")
    try:
        with gzip.open(path, "rt", encoding="ascii") as file:
            table = np.loadtxt(file, delimiter=",", dtype=np.float64, ndmin=2)
    except (OSError, ValueError, EOFError) as exc:
        raise DigitsDataError(f"cannot read the digits from {path}: {exc}") from exc
    if table.shape[1] != PIXELS + 1 or table.shape[0] == 0:
        raise DigitsDataError(
            f"{path}: expected rows of {PIXELS} pixels and a label, got a table {table.shape}"
        )
    pixels, labels = table[:, :PIXELS], table[:, PIXELS]
    if pixels.min() < 0 or pixels.max() > MAX_PIXEL:
        raise DigitsDataError(f"{path}: pixel values outside 0-{MAX_PIXEL:g}")
    if not np.isin(labels, np.arange(CLASSES)).all():
        raise DigitsDataError(f"{path}: labels outside 0-{CLASSES - 1}")
    order = np.random.default_rng(seed).permutation(len(table))
    test = round(len(table) * test_fraction)
    x = torch.from_numpy((pixels / MAX_PIXEL).astype(np.float32))
    y = torch.from_numpy(labels.astype(np.int64))
    test_rows, train_rows = torch.from_numpy(order[:test]), torch.from_numpy(order[test:])
    return Digits(x[train_rows], y[train_rows], x[test_rows], y[test_rows])


def digit_batches(
    x: Tensor, y: Tensor, batch_size: int, *, seed: int = 0
) -> Iterator[tuple[Tensor, Tensor]]:
    """Endless shuffled batches of ``batch_size`` rows (each pass a new seeded permutation)."""
    if not 1 <= batch_size <= len(x):
        raise DigitsDataError(f"a batch of {batch_size} rows from {len(x)}")
    generator = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x) - batch_size + 1, batch_size):
            rows = order[start : start + batch_size]
            yield x[rows], y[rows]
