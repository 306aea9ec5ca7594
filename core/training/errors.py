"""Errors raised on purpose by collaborative training beyond the worker's own."""

from __future__ import annotations

from core.worker.errors import TrainingError


class CheckpointError(TrainingError):
    """A checkpoint cannot be written or read; the message names the file."""
