"""LocalSwarm: the record a running local swarm leaves for the engine on the same computer.

A demo swarm listens on ports the system picks, so its addresses change every run. Once its
backbone is ready and its trainers are spawned, the swarm writes one small JSON record to
``<runtime>/swarms/<project>.json`` (atomically, readable by the user only): the project, its
manifest, where to join (the backbone's address, the shard server's URL), whether it is
moderated, when it started, and the processes it runs. It removes the record when it stops. The
engine reads these records to offer the swarm on first run, to join it (afresh at every start of
its peer), and to leave the swarm's processes out of "other programs' CPU use".

A swarm killed without a chance to clean up leaves its record behind; ``running_swarms`` keeps only
records whose swarm process still runs, and deletes the others. A process is named by its pid
*and* its start time, because the system reuses pids: a record whose pid now belongs to some later
process is stale too. A damaged record is skipped with a warning and left where it is; a reader that
looks again and again (the engine's ``LocalSwarms``) passes the same ``warned`` set each time, so
that each version of a damaged file is warned about once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from core.config.paths import UserDirs
from core.project.sections import PROJECT_NAME
from core.util.errors import BarnraiseError
from core.util.files.regular_file import FileRefused, read_regular_file

log = logging.getLogger(__name__)

SWARMS_FOLDER = "swarms"
MAX_RECORD_BYTES = 256 * 1024
"""A record is under a kilobyte; a bigger file in the folder (or a FIFO, a device) is not one."""
START_TIME_TOLERANCE = 1.0
"""Seconds two readings of one process's start time may differ by (the system derives it from its
boot time, which clock adjustments move a little); a pid reused by another process starts later."""

Warned = set[tuple[str, int]]
"""Damaged records already warned about, by path and modification time: one warning per version."""


class LocalSwarmError(BarnraiseError):
    """A swarm record that cannot be read or written; the message names the file."""


@dataclass(frozen=True)
class SwarmProcess:
    pid: int
    created: float
    """The process's start time (Unix time, as psutil reads it)."""

    @classmethod
    def of(cls, pid: int) -> SwarmProcess:
        """The running process ``pid`` (raises ``psutil.Error`` if there is none)."""
        return cls(pid, psutil.Process(pid).create_time())

    def alive(self) -> bool:
        """This very process still runs (not merely some process with its pid)."""
        try:
            process = psutil.Process(self.pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return False  # exited, waiting for its parent to reap it
            return abs(process.create_time() - self.created) <= START_TIME_TOLERANCE
        except psutil.Error:
            return False


@dataclass(frozen=True)
class LocalSwarm:
    project: str
    description: str
    manifest: Path
    """The manifest its peers use (a moderated swarm's own copy, naming its coordinator)."""
    initial_peers: tuple[str, ...]
    data_base: str
    """The URL of its shard server, where the manifest's relative data paths point."""
    pids: tuple[SwarmProcess, ...]
    """The swarm process first, then its children (the backbone, the trainers)."""
    moderated: bool
    started: float
    """Unix time the swarm started."""
    trainers: int = 0

    def __post_init__(self) -> None:
        if not PROJECT_NAME.fullmatch(self.project):
            raise LocalSwarmError(f"{self.project!r} is not a project name")
        if not self.pids:
            raise LocalSwarmError("a swarm record needs at least the swarm's own process")

    @property
    def key(self) -> tuple[str, int, float, float]:
        """Tells one run of a swarm from the next (both may have the same project and pid)."""
        return (self.project, self.pids[0].pid, self.pids[0].created, self.started)

    def alive(self) -> bool:
        """The swarm process still runs."""
        return self.pids[0].alive()

    def live_pids(self) -> list[int]:
        """The recorded processes that still run (a pid reused by another process is left out)."""
        return [p.pid for p in self.pids if p.alive()]

    def to_json(self) -> str:
        return json.dumps(
            {
                "project": self.project,
                "description": self.description,
                "manifest": str(self.manifest),
                "initial_peers": list(self.initial_peers),
                "data_base": self.data_base,
                "pids": [[p.pid, p.created] for p in self.pids],
                "moderated": self.moderated,
                "started": self.started,
                "trainers": self.trainers,
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> LocalSwarm:
        """Parse a record, checking every field (raises ``LocalSwarmError`` naming the problem)."""
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise LocalSwarmError(f"not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise LocalSwarmError("not a JSON object")
        return cls(
            project=_get(raw, "project", str),
            description=_get(raw, "description", str),
            manifest=Path(_get(raw, "manifest", str)),
            initial_peers=tuple(_strings(raw, "initial_peers")),
            data_base=_get(raw, "data_base", str),
            pids=tuple(_processes(raw.get("pids"))),
            moderated=_get(raw, "moderated", bool),
            started=_number(raw, "started"),
            trainers=_count(raw, "trainers"),
        )


def swarms_folder(dirs: UserDirs) -> Path:
    return dirs.runtime / SWARMS_FOLDER


def swarm_file(dirs: UserDirs, project: str) -> Path:
    if not PROJECT_NAME.fullmatch(project):
        raise LocalSwarmError(f"{project!r} is not a project name")
    return swarms_folder(dirs) / f"{project}.json"


def write_swarm(dirs: UserDirs, swarm: LocalSwarm) -> Path:
    """Write the record atomically, private to the user from its first byte; returns its path."""
    folder = dirs.ensure(swarms_folder(dirs))
    path = swarm_file(dirs, swarm.project)
    partial = folder / f".{path.name}.{os.getpid()}.part"
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(swarm.to_json())
        os.replace(partial, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise LocalSwarmError(f"cannot write the swarm record {path}: {exc}") from None
    return path


def remove_swarm(dirs: UserDirs, swarm: LocalSwarm) -> None:
    """Remove the record, if it is still this swarm's (a newer run may have replaced it)."""
    path = swarm_file(dirs, swarm.project)
    # gone already, unreadable or damaged: then it is not ours to delete either
    with contextlib.suppress(OSError, UnicodeDecodeError, LocalSwarmError):
        if LocalSwarm.from_json(path.read_text(encoding="utf-8")).key == swarm.key:
            path.unlink()


def running_swarms(dirs: UserDirs, *, warned: Warned | None = None) -> list[LocalSwarm]:
    """The demo swarms running on this computer, oldest first; stale records are deleted.

    A damaged record is warned about unless ``warned`` already holds its version (it is added)."""
    folder = swarms_folder(dirs)
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError as exc:
        log.warning("cannot look for local swarms in %s: %s", folder, exc)
        return []
    warned = set() if warned is None else warned
    found = [swarm for path in paths if (swarm := _read_running(path, warned)) is not None]
    return sorted(found, key=lambda s: s.started)


def find_swarm(dirs: UserDirs, project: str) -> LocalSwarm | None:
    """The running demo swarm of ``project``, read afresh (None when none runs)."""
    return next((s for s in running_swarms(dirs) if s.project == project), None)


def swarm_pids(swarms: Iterable[LocalSwarm]) -> list[int]:
    """Every process of these swarms that still runs."""
    return [pid for swarm in swarms for pid in swarm.live_pids()]


def new_record(
    *,
    project: str,
    description: str,
    manifest: Path,
    initial_peers: Iterable[str],
    data_base: str,
    children: Iterable[int],
    moderated: bool,
    trainers: int,
    started: float | None = None,
) -> LocalSwarm:
    """The record of the swarm running in this process, with its children's pids."""
    processes = [SwarmProcess.of(os.getpid())]
    for pid in children:
        with contextlib.suppress(psutil.Error):  # one that already exited is not worth naming
            processes.append(SwarmProcess.of(pid))
    return LocalSwarm(
        project=project,
        description=description,
        manifest=manifest.expanduser().absolute(),
        initial_peers=tuple(initial_peers),
        data_base=data_base,
        pids=tuple(processes),
        moderated=moderated,
        started=time.time() if started is None else started,
        trainers=trainers,
    )


def _read_running(path: Path, warned: Warned) -> LocalSwarm | None:
    try:
        text = read_regular_file(path, limit=MAX_RECORD_BYTES).decode("utf-8")
    except FileNotFoundError:
        return None  # removed by its swarm meanwhile
    except FileRefused as exc:
        _warn_damaged(path, exc.reason, warned)
        return None
    except (OSError, UnicodeDecodeError) as exc:
        _warn_damaged(path, str(exc), warned)
        return None
    try:
        swarm = LocalSwarm.from_json(text)
        if path.stem != swarm.project:
            raise LocalSwarmError(f"it names project {swarm.project!r}, not {path.stem!r}")
    except LocalSwarmError as exc:
        _warn_damaged(path, str(exc), warned)
        return None
    if swarm.alive():
        return swarm
    log.info("removing the record of a demo swarm that no longer runs: %s", path)
    with contextlib.suppress(OSError, FileRefused, UnicodeDecodeError):
        # not a new run's record written meanwhile
        if read_regular_file(path, limit=MAX_RECORD_BYTES).decode("utf-8") == text:
            path.unlink()
    return None


def _warn_damaged(path: Path, reason: str, warned: Warned) -> None:
    try:
        mark = (str(path), path.stat().st_mtime_ns)
    except OSError:
        mark = (str(path), 0)
    if mark not in warned:
        warned.add(mark)
        log.warning("skipping the damaged swarm record %s: %s", path, reason)


def _get(raw: dict[str, Any], name: str, kind: type) -> Any:
    value = raw.get(name)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise LocalSwarmError(f"{name!r} must be a {kind.__name__}, not {value!r}")
    return value


def _strings(raw: dict[str, Any], name: str) -> list[str]:
    value = raw.get(name)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise LocalSwarmError(f"{name!r} must be a list of strings")
    return list(value)


def _number(raw: dict[str, Any], name: str) -> float:
    value = raw.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise LocalSwarmError(f"{name!r} must be a finite number, not {value!r}")
    return float(value)


def _count(raw: dict[str, Any], name: str) -> int:
    value = raw.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LocalSwarmError(f"{name!r} must be a whole number >= 0, not {value!r}")
    return value


def _processes(value: object) -> list[SwarmProcess]:
    if not isinstance(value, list):
        raise LocalSwarmError("'pids' must be a list of [pid, start time] pairs")
    out = []
    for item in value:
        pid, created = item if isinstance(item, list) and len(item) == 2 else (None, None)
        if (
            isinstance(pid, bool)
            or not isinstance(pid, int)
            or pid <= 0
            or isinstance(created, bool)
            or not isinstance(created, int | float)
            or not math.isfinite(created)
        ):
            raise LocalSwarmError(f"'pids' holds {item!r}, not a [pid, start time] pair")
        out.append(SwarmProcess(pid, float(created)))
    return out
