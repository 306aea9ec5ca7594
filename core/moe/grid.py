"""Expert uids on a d-dimensional grid: ``"ffn.3.17"`` is expert (3, 17) of the grid named ``ffn``.

The grid is what makes the DHT search cheap (Learning@home, Section 3 and Appendix C): a trainer never
enumerates experts, it walks prefixes ``ffn`` -> ``ffn.3`` -> ``ffn.3.17``, one dimension at a time. A
uid is also a DHT key and arrives from other peers, so parsing is strict: one canonical spelling per
expert (no leading zeros, signs or spaces), every index inside the grid, exactly ``depth`` indices.

``uid_seed`` turns a uid into a stable seed: every server that hosts a uid starts it from the same
weights, and every trainer of a project builds its local layers alike from the project's name.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from core.util.errors import BarnraiseError

# bounds a uid's text before any splitting: uids come from the DHT, i.e. from strangers
MAX_UID_CHARS = 256
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_INDEX = re.compile(r"^(0|[1-9][0-9]{0,8})$")

Coords = tuple[int, ...]


class GridError(BarnraiseError):
    """A grid description or an expert uid that does not fit the grid."""


@dataclass(frozen=True, slots=True)
class ExpertGrid:
    """A named grid of ``shape[0] * shape[1] * ...`` expert slots."""

    prefix: str
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str) or not _NAME.match(self.prefix):
            raise GridError(
                f"grid prefix {self.prefix!r} must be 1-64 letters, digits, '_' or '-', "
                "starting with a letter or '_' (no dots: dots separate the indices)"
            )
        shape = tuple(self.shape)
        if not shape:
            raise GridError("a grid needs at least one dimension")
        for dim, size in enumerate(shape):
            if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 10**9:
                raise GridError(f"dimension {dim} of grid {self.prefix!r} has size {size!r}")
        object.__setattr__(self, "shape", shape)

    @property
    def depth(self) -> int:
        """How many indices a full uid has (d in the paper)."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """How many expert slots the grid has."""
        return math.prod(self.shape)

    def key(self, coords: Sequence[int]) -> str:
        """The uid (``depth`` indices) or prefix (fewer; none gives the bare grid name) of ``coords``."""
        coords = tuple(coords)
        if len(coords) > self.depth:
            raise GridError(f"{len(coords)} indices for grid {self.prefix!r} of depth {self.depth}")
        for dim, index in enumerate(coords):
            self._check_index(dim, index)
        return self.prefix + "".join(f".{index}" for index in coords)

    def uid(self, coords: Sequence[int]) -> str:
        """The uid of the expert at ``coords`` (exactly ``depth`` indices)."""
        if len(coords) != self.depth:
            raise GridError(
                f"an expert of grid {self.prefix!r} has {self.depth} indices, not {len(coords)}"
            )
        return self.key(coords)

    def parse_prefix(self, text: str) -> Coords:
        """The indices of a uid or prefix of this grid (0 to ``depth`` of them)."""
        if not isinstance(text, str):
            raise GridError(f"an expert uid is text, not {type(text).__name__}")
        if len(text) > MAX_UID_CHARS:
            raise GridError(f"expert uid of {len(text)} characters (at most {MAX_UID_CHARS})")
        name, *parts = text.split(".")
        if name != self.prefix:
            raise GridError(f"{text!r} is not on grid {self.prefix!r} (prefix {name!r})")
        if len(parts) > self.depth:
            raise GridError(
                f"{text!r} has {len(parts)} indices; grid {self.prefix!r} has {self.depth}"
            )
        coords = []
        for dim, part in enumerate(parts):
            if not _INDEX.match(part):
                raise GridError(f"index {dim} of {text!r} is {part!r}, not a plain decimal number")
            index = int(part)
            self._check_index(dim, index)
            coords.append(index)
        return tuple(coords)

    def parse(self, uid: str) -> Coords:
        """The indices of a full uid; a prefix or anything else is a ``GridError``."""
        coords = self.parse_prefix(uid)
        if len(coords) != self.depth:
            raise GridError(
                f"{uid!r} has {len(coords)} indices; an expert of grid {self.prefix!r} has {self.depth}"
            )
        return coords

    def prefixes(self, uid: str) -> list[str]:
        """The proper prefixes of ``uid``, shortest first: ``ffn``, ``ffn.3`` for ``ffn.3.17``."""
        coords = self.parse(uid)
        return [self.key(coords[:depth]) for depth in range(self.depth)]

    def all_uids(self) -> Iterator[str]:
        """Every uid of the grid in index order (for tests and small grids only)."""
        for coords in itertools.product(*(range(size) for size in self.shape)):
            yield self.key(coords)

    def _check_index(self, dim: int, index: int) -> None:
        if isinstance(index, bool) or not isinstance(index, int):
            raise GridError(f"index {dim} must be an int, not {type(index).__name__}")
        if not 0 <= index < self.shape[dim]:
            raise GridError(
                f"index {index} is outside dimension {dim} of grid {self.prefix!r} "
                f"(size {self.shape[dim]})"
            )


def uid_seed(uid: str) -> int:
    """A stable 63-bit seed for ``uid`` (Python's ``hash`` of text changes between runs)."""
    return int.from_bytes(hashlib.sha256(uid.encode()).digest()[:8], "big") >> 1
