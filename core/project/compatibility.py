"""Whether one version of a project's manifest can replace another in a running collaboration.

An organizer edits the manifest while the swarm trains; the coordinator serves each edit as a new
signed version (``core.coordinator.manifest_route``) and volunteers' engines pick it up
(``core.engine.join.manifest_updates``). Most changes are fine (new initial peers, data sources, the
coordinator, training numbers within their bounds). Some would split the swarm: peers that took the
new version could no longer average with those that did not. ``refusal`` names the first such change:
a collaborative project's ``[model]``, ``data.seq_len``, the tokenizer and its vocabulary size, the
optimizer and its state's format; a dmoe project's ``[grid]`` and its experts' kind, width and
optimizer; the project's name, kind or key. The coordinator refuses to serve such an edit, and an
engine refuses to take one, with the same words.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from core.project.dmoe import DmoeManifest
from core.project.kinds import AnyManifest
from core.project.manifest import Manifest

BREAKS = "which would break training; the project's organizer must start a new project"


def refusal(old: AnyManifest, new: AnyManifest) -> str | None:
    """Why ``new`` cannot replace ``old`` in a running collaboration, or None if it can."""
    if new.project.name != old.project.name:
        return (
            f"the update is the manifest of project {new.project.name!r}, not of "
            f"{old.project.name!r}, {BREAKS}"
        )
    if type(new) is not type(old):
        return f"the update changes project.kind from {old.project.kind!r} to {new.project.kind!r}, {BREAKS}"
    if isinstance(old, Manifest) and isinstance(new, Manifest):
        fixed: list[tuple[str, Any, Any]] = [
            *_fields("model", old.model, new.model),
            ("data.seq_len", old.data.seq_len, new.data.seq_len),
            # a peer keeps the tokenizer it fetched once; another one gives tokens other meanings
            ("data.tokenizer", old.data.tokenizer, new.data.tokenizer),
            (
                "data.tokenizer_vocab_size",
                old.data.tokenizer_vocab_size,
                new.data.tokenizer_vocab_size,
            ),
            ("training.optimizer", old.training.optimizer, new.training.optimizer),
            (
                "training.optimizer_states",
                old.training.optimizer_states,
                new.training.optimizer_states,
            ),
        ]
    elif isinstance(old, DmoeManifest) and isinstance(new, DmoeManifest):
        fixed = [
            *_fields("grid", old.grid, new.grid),
            ("expert.kind", old.expert.kind, new.expert.kind),
            ("expert.hidden", old.expert.hidden, new.expert.hidden),
            ("expert.optimizer", old.expert.optimizer, new.expert.optimizer),
        ]
    else:  # pragma: no cover - the kinds are checked above
        fixed = []
    for key, before, after in fixed:
        if before != after:
            return f"the update changes {key} from {_shown(before)} to {_shown(after)}, {BREAKS}"
    if old.access.project_key and new.access.project_key != old.access.project_key:
        return (
            f"the update changes access.project_key from {old.access.project_key} to "
            f"{new.access.project_key or 'nothing'}: a project keeps its key"
        )
    return None


def changed_keys(old: AnyManifest, new: AnyManifest) -> list[str]:
    """The dotted keys whose values differ (``network.initial_peers``, ``data.sources``)."""
    changed: list[str] = []
    for field in dataclasses.fields(old):
        if field.name == "path":
            continue
        before, after = getattr(old, field.name), getattr(new, field.name, None)
        if dataclasses.is_dataclass(before) and dataclasses.is_dataclass(after):
            changed.extend(key for key, a, b in _fields(field.name, before, after) if a != b)
    return changed


def _fields(prefix: str, old: Any, new: Any) -> list[tuple[str, Any, Any]]:
    return [
        (f"{prefix}.{f.name}", getattr(old, f.name), getattr(new, f.name))
        for f in dataclasses.fields(old)
    ]


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)
