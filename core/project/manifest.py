"""The project manifest of a ``collaborative`` project: one TOML file that says what a swarm
trains, on what, and how.

``load_manifest`` reads and validates a file; every problem becomes a ``ManifestError`` that names
the file, the dotted key and the reason. See ``resources/demo/project.toml`` for a commented example.
Reading the file safely (regular files of at most 1 MiB, bounded nesting) is ``reading``'s; every
number has an upper bound too, next to its field in ``sections``.

``load_manifest`` returns this kind only: a file that declares another ``[project] kind`` (a
``dmoe`` project, ``core.project.dmoe``) is refused with a ``ManifestError`` on ``project.kind``
that says what the file is and what reads it, so every caller that trains, coordinates or
benchmarks ALBERT gets a clear error rather than a manifest without the sections it reads. Callers
that take any kind use ``core.project.kinds.load_any_manifest``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin

from core.modes import active_modes
from core.project.errors import ManifestError
from core.project.evaluation import EvaluationSection
from core.project.reading import (
    MAX_MANIFEST_BYTES,
    MAX_NESTING,
    declared_kind,
    read_document,
    read_manifest_text,
    section,
    table,
)
from core.project.sections import (
    DEFAULT_KIND,
    LLAMA_CLM,
    AccessSection,
    AveragingSection,
    DataSection,
    ModelSection,
    NetworkSection,
    ProjectSection,
    SourceSection,
    TrainingSection,
)
from core.project.validation import check_keys, describe

__all__ = ["MAX_MANIFEST_BYTES", "MAX_NESTING", "Manifest", "load_manifest", "parse_manifest"]

_SECTIONS = (
    "project", "model", "data", "training", "averaging", "network", "access", "evaluation",
)  # fmt: skip
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class Manifest:
    project: ProjectSection
    model: ModelSection
    data: DataSection
    training: TrainingSection
    averaging: AveragingSection
    network: NetworkSection
    access: AccessSection = dataclasses.field(default_factory=AccessSection)
    evaluation: EvaluationSection = dataclasses.field(default_factory=EvaluationSection)
    path: Path | None = None
    """The file it was loaded from; relative data paths are resolved against its folder."""

    def __post_init__(self) -> None:
        # the rules that span sections; each section checked its own on creation
        if self.project.kind != DEFAULT_KIND:
            raise ManifestError(self.path, "project.kind", other_kind_reason(self.project.kind))
        if self.data.seq_len > self.model.max_position:
            raise ManifestError(
                self.path,
                "data.seq_len",
                f"must be at most model.max_position ({self.model.max_position}), "
                f"got {self.data.seq_len}",
            )
        if self.data.tokenizer_vocab_size != self.model.vocab_size:
            raise ManifestError(
                self.path,
                "data.tokenizer_vocab_size",
                f"must equal model.vocab_size ({self.model.vocab_size}), "
                f"got {self.data.tokenizer_vocab_size}",
            )
        if self.model.kind == LLAMA_CLM and self.data.mask_prob != DataSection.mask_prob:
            raise ManifestError(
                self.path,
                "data.mask_prob",
                f"a {LLAMA_CLM} model predicts every next token and masks none: leave the key "
                f"out (or at {DataSection.mask_prob}), got {self.data.mask_prob}",
            )
        mode = active_modes().parse(self.training.mode)  # the section checked the name
        if mode.checks_work(self.training) and self.model.dropout > 0:
            raise ManifestError(
                self.path,
                "training.work_checks",
                "work checks compute trainers' work again and need a forward pass without "
                f"dropout: set it to 0, or model.dropout to 0 (got {self.model.dropout})",
            )
        for key, reason in mode.check(self.training, self.averaging):
            raise ManifestError(self.path, key, reason)
        if self.access.moderated and not self.network.coordinator_url:
            raise ManifestError(
                self.path, "network.coordinator_url", "a moderated project needs its coordinator"
            )

    def resolve_url(self, url: str, *, data_base: str | None = None) -> str:
        """Where ``url`` points: URLs and absolute paths as they are, relative paths joined to
        ``data_base`` (a URL or a folder, e.g. a peer's local shard server) or else to the
        manifest's folder (or left relative to the working directory without a manifest file)."""
        if _URL.match(url) or Path(url).is_absolute():
            return url
        if data_base is not None:
            if _URL.match(data_base):
                return urljoin(data_base.rstrip("/") + "/", quote(url))
            return str(Path(data_base) / url)
        if self.path is None:
            return url
        return str(self.path.parent / url)

    def with_training(self, **changes: Any) -> Manifest:
        """A copy with some ``[training]`` values changed (e.g. from the command line), re-validated."""
        return self._with_section("training", changes)

    def with_access(self, **changes: Any) -> Manifest:
        """A copy with some ``[access]`` values changed, re-validated."""
        return self._with_section("access", changes)

    def with_network(self, **changes: Any) -> Manifest:
        """A copy with some ``[network]`` values changed, re-validated."""
        return self._with_section("network", changes)

    def with_averaging(self, **changes: Any) -> Manifest:
        """A copy with some ``[averaging]`` values changed, re-validated."""
        return self._with_section("averaging", changes)

    def _with_section(self, name: str, changes: Mapping[str, Any]) -> Manifest:
        section = getattr(self, name)
        fields = [f.name for f in dataclasses.fields(section)]
        try:
            check_keys(changes, fields, name)
            changed = dataclasses.replace(section, **changes)
        except ManifestError as error:
            raise error.at(self.path) from None
        return dataclasses.replace(self, **{name: changed})


def load_manifest(path: Path) -> Manifest:
    """Read and validate the ``collaborative`` manifest at ``path`` (a regular file of at most
    1 MiB); a manifest of another kind is a ``ManifestError`` on ``project.kind``."""
    path = path.expanduser().absolute()
    return parse_manifest(read_manifest_text(path), path=path)


def parse_manifest(text: str, *, path: Path | None = None) -> Manifest:
    """Validate manifest ``text``; ``path`` names it in errors and anchors relative paths."""
    return build_manifest(read_document(text, path), path)


def build_manifest(document: Mapping[str, Any], path: Path | None) -> Manifest:
    """The ``collaborative`` manifest in a TOML ``document`` already read."""
    kind = declared_kind(document)
    if kind != DEFAULT_KIND:
        raise ManifestError(path, "project.kind", other_kind_reason(kind))
    try:
        return _build(document, path)
    except ManifestError as error:
        raise error.at(path) from None


def other_kind_reason(kind: str) -> str:
    """Why a reader of collaborative manifests refuses one of ``kind``."""
    return (
        f"this is a {kind!r} project, and this reads {DEFAULT_KIND!r} (ALBERT training) projects "
        "only; a 'dmoe' project's experts are hosted with 'barnraise experts --manifest FILE' "
        "or by the engine (barnraise ctl attach)"
    )


def _build(document: Mapping[str, Any], path: Path | None) -> Manifest:
    check_keys(document, _SECTIONS, "", what="section")
    # sections in file order, so that the first mistake reported is the first one in the file
    return Manifest(
        project=section(ProjectSection, table(document, "project")),
        model=section(ModelSection, table(document, "model")),
        data=_data(table(document, "data")),
        training=section(TrainingSection, table(document, "training")),
        averaging=section(AveragingSection, table(document, "averaging")),
        network=section(NetworkSection, table(document, "network")),
        access=section(AccessSection, table(document, "access")),
        evaluation=section(EvaluationSection, table(document, "evaluation")),
        path=path,
    )


def _data(values: Mapping[str, Any]) -> DataSection:
    """``[data]`` with its ``[[data.sources]]`` tables (errors keyed ``data.sources[i]``)."""
    data = dict(values)
    sources = data.pop("sources", [])
    if not isinstance(sources, list):
        reason = f"expected array of tables ([[data.sources]]), got {describe(sources)}"
        raise ManifestError(None, "data.sources", reason)
    data["sources"] = tuple(_source(i, source) for i, source in enumerate(sources))
    return section(DataSection, data)


def _source(index: int, values: object) -> SourceSection:
    key = f"data.sources[{index}]"
    if not isinstance(values, dict):
        raise ManifestError(
            None, key, f"expected a table ([[data.sources]]), got {describe(values)}"
        )
    try:
        return section(SourceSection, values)
    except ManifestError as error:
        raise error.under(SourceSection.KEY, key) from None
