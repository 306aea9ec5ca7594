"""The manifest's ``[evaluation]`` section: the held-out text the backbone measures its replica on.

Training loss says how well the model fits what it is shown; only text kept apart from training
says whether it learned the language rather than the shards. The section names that text, how many
samples of it to measure (a bound, so that a large file cannot make every evaluation read it all),
and how often. Without ``urls`` nothing is evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from core.project.sections import DATA_FORMATS, MAX_TEXT, check_urls
from core.project.validation import FieldCheck

MAX_EVALUATION_SAMPLES = 65536
"""Sequences in one evaluation: minutes of a CPU's time for the largest presets, never more."""
MAX_EVERY = 10**6


@dataclass(frozen=True)
class EvaluationSection:
    KEY: ClassVar[str] = "evaluation"
    urls: tuple[str, ...] = ()
    """The held-out shards, written like ``[[data.sources]] urls`` (relative paths resolve where
    the training shards' do); none: no evaluation. They must hold no text the trainers read."""
    format: str = "auto"
    text_field: str = "text"
    """At most 4096 characters."""
    samples: int = 256
    """Sequences of ``data.seq_len`` tokens measured each time, read from the start of the shards
    in order, so that every evaluation measures the very same text: 1 to 65536."""
    every: int = 1
    """Epochs (``diloco``: rounds) between two evaluations, 1 to 10**6."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check_urls(check, self.urls)
        check.one_of("format", DATA_FORMATS)
        check.not_empty("text_field")
        check.at_most("text_field", MAX_TEXT)
        check.in_range("samples", 1, MAX_EVALUATION_SAMPLES)
        check.in_range("every", 1, MAX_EVERY)

    @property
    def enabled(self) -> bool:
        return bool(self.urls)
