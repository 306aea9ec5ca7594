"""Confusables: the skeleton of a username key, so that look-alike names can be told apart from new.

Unicode's UTS #39 defines the skeleton of a string: decompose it (NFD), replace each character by
the prototype of its confusable class, decompose again. Two strings with one skeleton look alike
(``alice`` with a Cyrillic ``a``, ``a1ice``, ``rnary``/``mary``). Ours is taken of a name's key
(NFKC, case-folded), and goes two steps further: the result is case-folded again (prototypes may
be capitals: ``0`` maps to ``O``, which must meet ``o``), repeated until it settles; and a combining
dot above after ``i`` or ``j`` is dropped, since on those soft-dotted letters it shows as nothing
(``ALİCE`` folds to ``i`` + U+0307).

The table is the subset of Unicode's ``confusables.txt`` a key can meet, shipped in
``resources/confusables/confusables.txt`` with its source, version, checksum and the script that
made it. A ``Confusables`` is loaded once by the store and is read-only after.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from pathlib import Path

from core.util.errors import ConfigError
from core.util.process.resources import resource_path

TABLE = resource_path("confusables/confusables.txt")
_DOT_ABOVE = "\u0307"
_SOFT_DOTTED = "ij"
_ROUNDS = 4


class Confusables:
    def __init__(self, table: Mapping[str, str]) -> None:
        self._table = dict(table)

    @classmethod
    def load(cls, path: Path = TABLE) -> Confusables:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read the confusables table {path}: {exc.strerror}") from None
        table: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), 1):
            if not line or line.startswith("#"):
                continue
            try:
                source, *target = (chr(int(field, 16)) for field in line.split())
            except ValueError:
                raise ConfigError(f"{path}:{number} is not a confusables entry") from None
            table[source] = "".join(target)
        return cls(table)

    def __len__(self) -> int:
        return len(self._table)

    def skeleton(self, key: str) -> str:
        """The skeleton of a name's key: equal skeletons mean names that look alike."""
        text = unicodedata.normalize("NFD", key)
        for _ in range(_ROUNDS):
            mapped = "".join(self._table.get(char, char) for char in text)
            settled = unicodedata.normalize("NFD", mapped.casefold())
            if settled == text:
                break
            text = settled
        return _drop_invisible_dots(text)


def _drop_invisible_dots(text: str) -> str:
    kept: list[str] = []
    for char in text:
        if char == _DOT_ABOVE and kept and kept[-1] in _SOFT_DOTTED:
            continue
        kept.append(char)
    return "".join(kept)
