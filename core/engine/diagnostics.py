"""Diagnostics: what a bug report needs from the engine, and nothing secret.

Versions (engine, API, Python, the platform, torch only if training already loaded it: asking must
not load it), the process, when it started, where its folders and files are, the training device
with the NVIDIA driver and each GPU as they are now (``core.worker.accelerator``), and the last
lines of its log file. The log is read from its end only (at most ``TAIL_BYTES``), on the engine's
blocking pool, so a large file neither stalls the loop nor fills the answer.

Never in the answer: the control token, passwords, session or refresh secrets, keys. None of them
is logged on purpose; as a second line of defence, every secret the caller names is blotted out of
the log lines before they leave.
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys
from collections.abc import Iterable
from pathlib import Path

from core import __version__
from core.api.schema import API_VERSION, Diagnostics
from core.engine.config import EngineConfig
from core.util.blocking import BlockingPool
from core.util.files.regular_file import FileRefused, open_regular_file

TAIL_LINES = 200
TAIL_BYTES = 256 * 1024
REDACTED = "[redacted]"


async def diagnostics(
    config: EngineConfig,
    *,
    blocking: BlockingPool,
    started: float,
    secrets: Iterable[str] = (),
    network: Iterable[str] = (),
    accelerator: Iterable[str] = (),
) -> Diagnostics:
    tail, system = await asyncio.gather(
        blocking.run(log_tail, config.engine_log),
        blocking.run(platform.platform),  # may run a program (uname) the first time
    )
    hidden = [s for s in secrets if s]
    dirs = config.dirs
    torch = sys.modules.get("torch")  # loaded by training, if it ran; never imported here
    torch_version = getattr(torch, "__version__", None) if torch is not None else None
    return Diagnostics(
        engine_version=__version__,
        api_version=API_VERSION,
        pid=os.getpid(),
        platform=system,
        python=platform.python_version(),
        started=started,
        paths={
            "config": str(dirs.config),
            "data": str(dirs.data),
            "cache": str(dirs.cache),
            "logs": str(dirs.logs),
            "runtime": str(dirs.runtime),
            "settings": str(config.settings_file),
            "ledger": str(config.ledger_file),
            "engine_log": str(config.engine_log),
        },
        torch=str(torch_version) if torch_version is not None else None,
        log_tail=[_redact(line, hidden) for line in tail],
        network=list(network),
        accelerator=list(accelerator),
    )


def log_tail(path: Path, lines: int = TAIL_LINES, max_bytes: int = TAIL_BYTES) -> list[str]:
    """The last ``lines`` lines of ``path``, read from at most its last ``max_bytes``."""
    try:
        with open_regular_file(path) as file:  # a FIFO in its place must not hang the reader
            size = file.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            file.seek(start)
            data = file.read(max_bytes)
    except FileNotFoundError:
        return []
    except (OSError, FileRefused) as exc:
        return [f"(cannot read the engine's log {path}: {exc})"]
    rows = data.decode("utf-8", errors="replace").splitlines()
    if start > 0 and rows:
        rows = rows[1:]  # the read began inside a line
    return rows[-lines:] if lines > 0 else []


def _redact(line: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret in line:
            line = line.replace(secret, REDACTED)
    return line
