"""The export's folder appears whole or not at all (``core.util.files.staged_folder``): a target
that holds anything is refused unless the organizer asked to overwrite it."""

from __future__ import annotations

from core.export.errors import ExportError
from core.util.files.staged_folder import FolderRules

EXPORT_FOLDER = FolderRules(
    error=ExportError,
    staging_prefix=".barnraise-export-",
    not_a_folder="choose another output folder",
    not_empty="choose another output folder, or overwrite it (--overwrite); nothing was written",
)
