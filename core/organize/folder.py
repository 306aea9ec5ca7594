"""A new project folder appears whole or not at all, and never over someone's files
(``core.util.files.staged_folder``); only its owner and group may enter it."""

from __future__ import annotations

from core.util.errors import ConfigError
from core.util.files.staged_folder import FolderRules

PROJECT_FOLDER = FolderRules(
    error=ConfigError,
    staging_prefix=".barnraise-new-",
    not_a_folder="choose another --dir (nothing was written)",
    not_empty=(
        "choose another --dir, or move its files away first (nothing was written, nothing there "
        "was touched)"
    ),
    mode=0o750,
)
