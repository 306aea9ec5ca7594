"""The project manifest: one TOML file that says what a swarm trains, on what, and how.

``load_manifest`` reads and validates a file; every problem becomes a ``ManifestError`` that names
the file, the dotted key and the reason. See ``resources/demo/project.toml`` for a commented example.

A manifest's path comes from a user, so it may name anything: only a regular file (a symbolic link
to one is fine) of at most ``MAX_MANIFEST_BYTES`` is read, opened without blocking, so that a FIFO
or a device is refused at once instead of hanging or flooding the reader; and a document nested
more than ``MAX_NESTING`` levels deep is refused before anything walks it (a real manifest nests
four). Every number has an upper bound too, next to its field in ``sections``.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar
from urllib.parse import quote, urljoin

from core.project.errors import ManifestError
from core.project.prescan import nesting
from core.project.sections import (
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
from core.util.nesting import deeper_than
from core.util.regular_file import FileRefused, read_regular_file


class _Section(Protocol):
    KEY: ClassVar[str]
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


SectionT = TypeVar("SectionT", bound=_Section)

_SECTIONS = ("project", "model", "data", "training", "averaging", "network", "access")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")

MAX_MANIFEST_BYTES = 1024 * 1024
"""A manifest is a few kilobytes; anything over 1 MiB is not one, and is refused unread."""
MAX_NESTING = 16
"""Tables and arrays nested deeper than this are refused (the document itself is level 0)."""


@dataclass(frozen=True)
class Manifest:
    project: ProjectSection
    model: ModelSection
    data: DataSection
    training: TrainingSection
    averaging: AveragingSection
    network: NetworkSection
    access: AccessSection = dataclasses.field(default_factory=AccessSection)
    path: Path | None = None
    """The file it was loaded from; relative data paths are resolved against its folder."""

    def __post_init__(self) -> None:
        # the rules that span sections; each section checked its own on creation
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
    """Read and validate the manifest at ``path`` (a regular file of at most 1 MiB)."""
    path = path.expanduser().absolute()
    try:
        raw = read_regular_file(path, limit=MAX_MANIFEST_BYTES)
    except FileRefused as refused:
        reason = refused.reason.replace("not a regular file", "not a manifest file")
        raise ManifestError(path, "", reason) from None
    except FileNotFoundError:
        raise ManifestError(path, "", "no such file") from None
    except IsADirectoryError:
        raise ManifestError(path, "", "is a folder, not a manifest file") from None
    except OSError as error:
        raise ManifestError(path, "", f"cannot read: {error.strerror or error}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        reason = f"is not UTF-8 text (invalid byte at offset {error.start})"
        raise ManifestError(path, "", reason) from None
    return parse_manifest(text, path=path)


def parse_manifest(text: str, *, path: Path | None = None) -> Manifest:
    """Validate manifest ``text``; ``path`` names it in errors and anchors relative paths."""
    if len(text) > MAX_MANIFEST_BYTES:
        reason = f"is too large ({len(text):,} characters; the limit is {MAX_MANIFEST_BYTES:,})"
        raise ManifestError(path, "", reason)
    shape = nesting(text)
    if shape.dots > MAX_NESTING:
        reason = f"a key has more than {MAX_NESTING} dotted parts"
        raise ManifestError(path, "", reason)
    # a table header's brackets count too: [[data.sources]] is two
    if shape.brackets > MAX_NESTING + 2 or deeper_than(document := _toml(text, path), MAX_NESTING):
        reason = f"tables and arrays are nested more than {MAX_NESTING} levels deep"
        raise ManifestError(path, "", reason)
    try:
        return _build(document, path)
    except ManifestError as error:
        raise error.at(path) from None


def _toml(text: str, path: Path | None) -> dict[str, Any]:
    """The TOML document in ``text``; every way ``tomllib`` can refuse it is a ``ManifestError``."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        position = _TOML_POSITION.search(message)
        if position is None:
            raise ManifestError(path, "", f"invalid TOML: {message}") from None
        line, column = int(position.group(1)), int(position.group(2))
        detail = message[: position.start()]
        reason = f"invalid TOML at line {line}, column {column}: {detail}"
        raise ManifestError(path, "", reason, line) from None
    except RecursionError:  # tomllib reads nested arrays and inline tables recursively
        reason = f"tables and arrays are nested more than {MAX_NESTING} levels deep"
        raise ManifestError(path, "", reason) from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        said = str(error).split(";")[0]  # not the advice to raise Python's own limit
        raise ManifestError(path, "", f"invalid TOML: {said}") from None


def _build(document: Mapping[str, Any], path: Path | None) -> Manifest:
    check_keys(document, _SECTIONS, "", what="section")
    # sections in file order, so that the first mistake reported is the first one in the file
    return Manifest(
        project=_section(ProjectSection, _table(document, "project")),
        model=_section(ModelSection, _table(document, "model")),
        data=_data(_table(document, "data")),
        training=_section(TrainingSection, _table(document, "training")),
        averaging=_section(AveragingSection, _table(document, "averaging")),
        network=_section(NetworkSection, _table(document, "network")),
        access=_section(AccessSection, _table(document, "access")),
        path=path,
    )


def _data(table: Mapping[str, Any]) -> DataSection:
    """``[data]`` with its ``[[data.sources]]`` tables (errors keyed ``data.sources[i]``)."""
    data = dict(table)
    sources = data.pop("sources", [])
    if not isinstance(sources, list):
        reason = f"expected array of tables ([[data.sources]]), got {describe(sources)}"
        raise ManifestError(None, "data.sources", reason)
    data["sources"] = tuple(_source(i, source) for i, source in enumerate(sources))
    return _section(DataSection, data)


def _table(document: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """A section's table; an omitted section is an empty one (all defaults)."""
    table = document.get(key, {})
    if not isinstance(table, dict):
        raise ManifestError(None, key, f"expected a table ([{key}]), got {describe(table)}")
    return table


def _section(cls: type[SectionT], table: Mapping[str, Any]) -> SectionT:
    """An instance of section ``cls`` from its table: unknown or missing keys are errors."""
    prefix = cls.KEY
    fields = dataclasses.fields(cls)
    check_keys(table, [f.name for f in fields], prefix)
    for field in fields:
        required = field.default is dataclasses.MISSING
        required = required and field.default_factory is dataclasses.MISSING
        if required and field.name not in table:
            raise ManifestError(None, f"{prefix}.{field.name}", "required key is missing")
    return cls(**table)


def _source(index: int, table: object) -> SourceSection:
    key = f"data.sources[{index}]"
    if not isinstance(table, dict):
        raise ManifestError(
            None, key, f"expected a table ([[data.sources]]), got {describe(table)}"
        )
    try:
        return _section(SourceSection, table)
    except ManifestError as error:
        raise error.under(SourceSection.KEY, key) from None
