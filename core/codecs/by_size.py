"""Picking a codec per tensor by its size (``auto``)."""

from __future__ import annotations

from dataclasses import dataclass

from core.codecs.spec import Codec


@dataclass(frozen=True)
class BySize:
    """``small`` for tensors of fewer than ``below`` values, ``large`` for the others."""

    small: Codec
    large: Codec
    below: int

    @property
    def candidates(self) -> tuple[Codec, ...]:
        return (self.small, self.large)

    def pick(self, numel: int) -> Codec:
        return self.small if numel < self.below else self.large
