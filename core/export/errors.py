"""``ExportError``: a project's model that cannot be exported, and why."""

from __future__ import annotations

from core.util.errors import BarnraiseError


class ExportError(BarnraiseError):
    """The manifest, checkpoint, tokenizer or output folder does not allow an export; the message
    names the file and what is wrong with it."""
