"""The folder a backbone publishes into and a web server serves: a signed index and the files it
names, the checkpoint's (``checkpoint``) or the model's (``model``).

A publication keeps the file the index names and the one named before it, so that a download that
began just before a new publication still finds its file; here the one named before is found and
the others are removed.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from core.util.files.atomic import remove_old


def previously_published(folder: Path, index_name: str, file_name: re.Pattern[str]) -> str | None:
    """The file the index ``folder/index_name`` names, if it is readable and the name has the
    shape ``file_name`` (never a path)."""
    try:
        raw = json.loads((folder / index_name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    file = raw.get("file") if isinstance(raw, dict) else None
    return file if isinstance(file, str) and file_name.fullmatch(file) else None


def prune(
    folder: Path, keep: set[str | None], file_name: re.Pattern[str], what: str, log: logging.Logger
) -> None:
    """Remove the files in ``folder`` named like ``file_name`` (each a ``what``) but those in
    ``keep``, logging to the publisher's ``log``."""
    # failing to free space is worth a warning, not an error for a publication that succeeded
    try:
        names = [path for path in folder.iterdir() if file_name.fullmatch(path.name)]
    except OSError as exc:
        log.warning("could not list %s to remove old %ss: %s", folder, what, exc)
        return
    for path in names:
        if path.name not in keep:
            remove_old(path, log, what)
