"""Fetching torch on first run, for the app: whether it is needed, the command, its progress lines.

A light bundle carries no torch (``core.config.runtime_packages``); the app runs ``fetch_command()``
(``barnraise torch install --json``) in a child process and reads one ``FetchProgress`` per line of
its output, to show a progress bar and, when the download cannot start, why in words (``offline``:
the index could not be reached at all). The command is the same one a person runs in a terminal.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import asdict, dataclass
from typing import Literal

from core.util.errors import WireFormatError
from core.util.process.launch import barnraise_command, frozen

Stage = Literal["choosing", "checking", "downloading", "installing", "done", "failed"]
STAGES: tuple[Stage, ...] = (
    "choosing",
    "checking",
    "downloading",
    "installing",
    "done",
    "failed",
)


@dataclass(frozen=True)
class FetchProgress:
    """One step of ``barnraise torch install``: a stage, words for people, and bytes where known.

    ``done``/``total`` count the bytes of the file being downloaded (``package``), ``total`` 0
    when unknown. ``offline`` is set on ``failed`` when the index could not be reached at all."""

    stage: Stage
    text: str
    package: str = ""
    done: int = 0
    total: int = 0
    offline: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> FetchProgress:
        try:
            data = json.loads(line)
            stage = data["stage"]
            if stage not in STAGES:
                raise WireFormatError(f"unknown stage {stage!r}")
            return cls(
                stage=stage,
                text=str(data["text"]),
                package=str(data.get("package", "")),
                done=int(data.get("done", 0)),
                total=int(data.get("total", 0)),
                offline=bool(data.get("offline", False)),
            )
        except (ValueError, KeyError, TypeError) as bad:
            raise WireFormatError(f"not a progress line: {line[:80]!r}") from bad

    @classmethod
    def read_line(cls, line: str) -> FetchProgress | None:
        """The progress on a line of the command's output; None for any other line."""
        try:
            return cls.from_json(line)
        except WireFormatError:
            return None


def torch_missing() -> bool:
    """Whether this is a bundle that still has to fetch torch (found on ``sys.path`` or not;
    looked up, not imported: the app never imports torch)."""
    return frozen() and importlib.util.find_spec("torch") is None


def fetch_command(*extra: str) -> list[str]:
    """The command line that fetches torch and reports in ``FetchProgress`` lines."""
    return barnraise_command("torch", "install", "--json", *extra)
