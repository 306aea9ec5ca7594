"""The folder where a light bundle keeps the torch it fetched on first run, and putting it on the path.

A light bundle (``packaging/bundle.py``) carries everything but torch: torch comes in one build per
kind of accelerator (CPU, each CUDA version), each hundreds of megabytes to gigabytes, so the app
fetches the one that suits the computer on first run (``barnraise torch install``) into this folder
of the user's own data: ``DATA/runtime/py311`` (one per Python version, which its wheels are for).

``activate`` is the first thing every process of the bundle does (``packaging/frozen_entry.py``):
the app, the engine it starts, the swarm's peers. It puts the folder at the *end* of ``sys.path``, so
what the bundle carries wins over a second copy pip put here as a dependency of torch, and creates
it (empty) if need be: an existing folder is one Python looks into again when its contents change,
so an engine started before the download finished finds torch once it is there. The install is
published all at once (``publish``): pip installs into a staging folder beside it, then each top
folder is moved in and ``installed.json`` is written last; without that file the folder counts as
empty and the next install clears it first.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from core.config.paths import UserDirs

MARKER = "installed.json"


@dataclass(frozen=True)
class Installed:
    """What ``installed.json`` says: which build was fetched, from where, why and when."""

    requirement: str
    index_url: str | None
    reason: str
    installed_at: float


def folder(dirs: UserDirs | None = None) -> Path:
    dirs = dirs or UserDirs.default()
    return dirs.data / "runtime" / f"py{sys.version_info.major}{sys.version_info.minor}"


def staging(dirs: UserDirs | None = None) -> Path:
    """Where pip installs before ``publish``: beside the folder, on the same file system."""
    place = folder(dirs)
    return place.with_name(place.name + ".staging")


def activate(dirs: UserDirs | None = None) -> Path:
    """Create the folder if need be and append it to ``sys.path``; the folder."""
    place = folder(dirs)
    (dirs or UserDirs.default()).ensure(place)
    if str(place) not in sys.path:
        sys.path.append(str(place))
    return place


def installed(dirs: UserDirs | None = None) -> Installed | None:
    """The build in the folder, or None when nothing was published there (or its note is bad)."""
    try:
        data = json.loads((folder(dirs) / MARKER).read_text(encoding="utf-8"))
        return Installed(
            requirement=str(data["requirement"]),
            index_url=None if data.get("index_url") is None else str(data["index_url"]),
            reason=str(data.get("reason", "")),
            installed_at=float(data["installed_at"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def clear(dirs: UserDirs | None = None) -> None:
    """Empty the folder (it stays, so the path entries of running processes stay good)."""
    place = folder(dirs)
    if not place.is_dir():
        return
    (place / MARKER).unlink(missing_ok=True)  # first: a half-cleared folder is an empty one
    for entry in place.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def publish(
    source: Path, requirement: str, index_url: str | None, reason: str, dirs: UserDirs | None = None
) -> Installed:
    """Move what pip installed in ``source`` into the folder (emptied first) and write the note."""
    place = folder(dirs)
    (dirs or UserDirs.default()).ensure(place)
    clear(dirs)
    for entry in sorted(source.iterdir()):
        shutil.move(str(entry), str(place / entry.name))
    note = Installed(requirement, index_url, reason, time.time())
    (place / MARKER).write_text(json.dumps(asdict(note), indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(source, ignore_errors=True)
    return note
