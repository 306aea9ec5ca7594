"""The checks every model configuration makes of its sizes, with the same wording for all kinds."""

from __future__ import annotations

from collections.abc import Iterable


def check_positive_ints(config: object, names: Iterable[str]) -> None:
    """Each of ``names`` is an int above 0 (not a bool); ``ValueError`` naming the first that is not."""
    kind = type(config).__name__
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{kind}.{name} must be a positive integer, got {value!r}")


def check_divisible(config: object, whole: str, part: str) -> None:
    """``whole`` divides by ``part`` (e.g. the hidden width into heads)."""
    kind = type(config).__name__
    a, b = getattr(config, whole), getattr(config, part)
    if a % b:
        raise ValueError(f"{kind}.{whole} ({a}) must be divisible by {part} ({b})")
