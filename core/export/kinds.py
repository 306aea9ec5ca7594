"""The model kinds that can be exported, each with its ``KindMapping``.

A new kind is one module beside ``albert`` and ``llama`` and one row here; a kind without a row is
refused with the list of those that have one.
"""

from __future__ import annotations

from types import MappingProxyType

from core.export.albert import ALBERT
from core.export.errors import ExportError
from core.export.llama import LLAMA
from core.export.mapping import KindMapping
from core.project.sections import ALBERT_MLM, LLAMA_CLM

MAPPINGS = MappingProxyType({ALBERT_MLM: ALBERT, LLAMA_CLM: LLAMA})
"""``[model] kind`` to its mapping (read-only)."""


def mapping_for(kind: str) -> KindMapping:
    """The mapping of model kind ``kind``; ``ExportError`` for one that has none."""
    found = MAPPINGS.get(kind)
    if found is None:
        raise ExportError(
            f"models of kind {kind!r} cannot be exported yet; exportable kinds: "
            f"{', '.join(sorted(MAPPINGS))}"
        )
    return found
