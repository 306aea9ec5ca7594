"""What can go wrong in the engine's commands, said in the engine's own terms.

The engine never raises the control API's HTTP-level classes: it says what went wrong (a value out
of range, a project it does not know, a project attached twice, a model too large for this
computer, no coordinator to ask, a settings file it cannot write) and the control server's one
table decides the status and code. Errors of the parts below keep their own classes
(``PreferencesError``, ``ManifestError``, the account's errors, ``LedgerError``).
``ShutdownIncomplete`` lists what failed while the engine stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.util.errors import BarnraiseError


class EngineError(BarnraiseError):
    """A command the engine cannot carry out; the message says why."""


class InvalidArgument(EngineError):
    """A value given to a command is empty or out of range (the message names it)."""


class UnknownProject(EngineError):
    """No attached project (nor any the ledger remembers) has that name."""


class AlreadyAttached(EngineError):
    """A project of that name is attached already."""


class NoCoordinator(EngineError):
    """An account call, but no project is attached, or the active one is open (no accounts)."""


class NotJoinedByUrl(EngineError):
    """A call about a project's URL (its signed updates) for a project attached from a file."""


class DoesNotFit(EngineError):
    """A project's model cannot fit this computer's memory (the message gives the figures)."""


class SettingsNotSaved(EngineError):
    """The engine's settings file cannot be written (disk full, permissions); what was asked for
    holds until the engine stops."""


@dataclass(frozen=True)
class PartFailure:
    """One part that could not be stopped or written while closing."""

    part: str
    """What failed, in words: "flushing the ledger", "saving the settings"."""
    error: BaseException


class ShutdownIncomplete(EngineError):
    """Everything was stopped, but some parts failed to close or to write what they held."""

    def __init__(self, failures: Sequence[PartFailure]) -> None:
        self.failures = tuple(failures)
        said = "; ".join(f"{f.part} failed: {f.error or type(f.error).__name__}" for f in failures)
        super().__init__(
            f"stopped, but {said}; the last contribution or settings may not have been written"
        )

    def __reduce__(self) -> tuple[type[ShutdownIncomplete], tuple[tuple[PartFailure, ...]]]:
        # the default would call ShutdownIncomplete(message), which does not fit __init__
        return (type(self), (self.failures,))
