"""Reading a manifest file into a TOML document, and building sections from its tables.

Every kind of manifest (``collaborative`` ALBERT training, ``dmoe`` expert grids) is read the same
way, so the guards live here once: only a regular file (a symbolic link to one is fine) of at most
``MAX_MANIFEST_BYTES`` is read, opened without blocking, so that a FIFO or a device is refused at
once instead of hanging or flooding the reader; a document nested more than ``MAX_NESTING`` levels
deep, or with a dotted key of more parts, is refused before anything walks it (a real manifest
nests four). ``declared_kind`` says which kind the document declares (``[project] kind``), so the
loaders can build the right manifest, or refuse the wrong one with a clear error.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from core.project.errors import ManifestError
from core.project.prescan import nesting
from core.project.sections import DEFAULT_KIND, PROJECT_KINDS
from core.project.validation import check_keys, describe
from core.util.files.regular_file import FileRefused, read_regular_file
from core.util.nesting import deeper_than

_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")

MAX_MANIFEST_BYTES = 1024 * 1024
"""A manifest is a few kilobytes; anything over 1 MiB is not one, and is refused unread."""
MAX_NESTING = 16
"""Tables and arrays nested deeper than this are refused (the document itself is level 0)."""


class Section(Protocol):
    KEY: ClassVar[str]
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


SectionT = TypeVar("SectionT", bound=Section)


def read_manifest_text(path: Path) -> str:
    """The text of the manifest at ``path`` (absolute already); every refusal is a ManifestError."""
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
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        reason = f"is not UTF-8 text (invalid byte at offset {error.start})"
        raise ManifestError(path, "", reason) from None


def read_document(text: str, path: Path | None) -> dict[str, Any]:
    """The TOML document in manifest ``text``, after the size and nesting guards."""
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
    return document


def declared_kind(document: Mapping[str, Any]) -> str:
    """``[project] kind`` as the document says it (the default kind when it says nothing).

    A value that is not a known kind is left for ``ProjectSection`` to refuse with its message,
    except that it is never mistaken for another kind."""
    project = document.get("project")
    if not isinstance(project, dict):
        return DEFAULT_KIND
    kind = project.get("kind", DEFAULT_KIND)
    return kind if isinstance(kind, str) and kind in PROJECT_KINDS else DEFAULT_KIND


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


def table(document: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """A section's table; an omitted section is an empty one (all defaults)."""
    found = document.get(key, {})
    if not isinstance(found, dict):
        raise ManifestError(None, key, f"expected a table ([{key}]), got {describe(found)}")
    return found


def section(cls: type[SectionT], values: Mapping[str, Any]) -> SectionT:
    """An instance of section ``cls`` from its table: unknown or missing keys are errors."""
    prefix = cls.KEY
    fields = dataclasses.fields(cls)
    check_keys(values, [f.name for f in fields], prefix)
    for field in fields:
        required = field.default is dataclasses.MISSING
        required = required and field.default_factory is dataclasses.MISSING
        if required and field.name not in values:
            raise ManifestError(None, f"{prefix}.{field.name}", "required key is missing")
    return cls(**values)
