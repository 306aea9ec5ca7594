"""Errors raised on purpose by the training loop and its helpers."""

from __future__ import annotations

from core.util.errors import BarnraiseError


class TrainingError(BarnraiseError):
    """Training cannot go on as asked; the message says what is wrong and why."""


class CheckpointError(TrainingError):
    """A checkpoint cannot be written or read; the message names the file."""


class Interrupted(TrainingError):
    """The loop asked the training thread to stop what it was computing (a pause)."""
