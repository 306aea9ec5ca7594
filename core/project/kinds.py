"""Reading a manifest of any kind: what the engine and its account use, since a volunteer may
attach a ``collaborative`` project or a ``dmoe`` one.

``load_manifest`` stays the reader of collaborative manifests (its many callers train, coordinate
and benchmark ALBERT, and get a clear error for another kind); ``load_dmoe_manifest`` reads the
other kind; ``load_any_manifest`` returns whichever the file declares. Both kinds share the sections
that say who the project is and how to reach it (``project``, ``network``, ``access``), which is
all a caller that takes any kind may read without looking at the type.
"""

from __future__ import annotations

from pathlib import Path

from core.project.dmoe import DMOE, DmoeManifest, build_dmoe_manifest
from core.project.manifest import Manifest, build_manifest
from core.project.reading import declared_kind, read_document, read_manifest_text

AnyManifest = Manifest | DmoeManifest


def load_any_manifest(path: Path) -> AnyManifest:
    """The manifest at ``path``, of the kind it declares (``[project] kind``)."""
    path = path.expanduser().absolute()
    return parse_any_manifest(read_manifest_text(path), path=path)


def parse_any_manifest(text: str, *, path: Path | None = None) -> AnyManifest:
    """The manifest in ``text``, of the kind it declares; ``path`` names it in errors."""
    document = read_document(text, path)
    if declared_kind(document) == DMOE:
        return build_dmoe_manifest(document, path)
    return build_manifest(document, path)
