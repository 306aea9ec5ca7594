"""Random token ids for the model tests, the same for a given seed."""

from __future__ import annotations

import torch


def random_ids(batch: int, time: int, vocab: int, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, time), generator=generator)
