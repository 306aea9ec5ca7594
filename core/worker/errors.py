"""Errors of the torch worker: work that cannot go on, and work the loop interrupted."""

from __future__ import annotations

from core.util.errors import BarnraiseError


class TrainingError(BarnraiseError):
    """Training cannot go on as asked; the message says what is wrong and why."""


class Interrupted(TrainingError):
    """The loop asked the training thread to stop what it was computing (a pause)."""
