"""Reading the generated service files back as systemd, compose and a shell would."""

from __future__ import annotations

import json
import shlex
from pathlib import Path


def read_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """``{section: {key: [values]}}`` of a unit file (comments and blank lines skipped)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for line in path.read_text().splitlines():
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        assert current is not None, f"{path}: {line!r} before any section"
        key, value = line.split("=", 1)
        current.setdefault(key, []).append(value)
    return sections


def systemd_words(value: str) -> list[str]:
    """A command line as systemd splits it: quotes and backslash escapes (all that the writer
    emits), then ``%%`` and ``$$`` back to ``%`` and ``$``."""
    return [word.replace("%%", "%").replace("$$", "$") for word in shlex.split(value)]


def systemd_path(value: str) -> str:
    return value.replace("%%", "%")


def env_file(path: Path) -> dict[str, str]:
    """``NAME='value'`` lines, single quotes taken literally (systemd, compose and sh agree)."""
    values = {}
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line:
            continue
        name, quoted = line.split("=", 1)
        assert quoted.startswith("'"), line
        assert quoted.endswith("'"), line
        values[name] = quoted[1:-1]
    return values


def compose_commands(path: Path) -> dict[str, list[str]]:
    """Each service's ``command:`` (written as JSON arrays, which YAML reads as lists)."""
    commands = {}
    service = None
    for line in path.read_text().splitlines():
        if line.startswith("  ") and not line.startswith("   ") and line.endswith(":"):
            service = line.strip().removesuffix(":")
        elif line.startswith("    command: "):
            assert service is not None
            commands[service] = json.loads(line.removeprefix("    command: "))
    return commands
