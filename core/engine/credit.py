"""LandedEpochs: the engine's own count of its work, epoch by epoch, and how it compares with what
the project's coordinator credited.

Each ``PeerEpoch`` of the active project's peer (an epoch whose update it applied, with its own
samples in it) becomes a row of the ledger's ``landed`` table under this computer's peer key, the
key the coordinator credits. ``compare`` sets the rows kept (the newest of the project) beside the
coordinator's answer for the same key from the oldest of them on, and says for each epoch that
differs why it most likely does:

- newer than any epoch the coordinator has heard of: the backbone has not reported it yet;
- recorded here, credited nothing: never reported for this key, or refused (a pass, a key); in a
  project that checks its volunteers' work, perhaps held too, until a check of this computer's
  work passes (the backbone tells nobody what it holds, so this is said as a possibility);
- both counted, differently: the samples differ;
- credited, no record here: the rows of an older ledger, or another install sharing the key;
- credited less by the project's work checks (or withdrawn by them): the coordinator's note of
  why, as the backbone wrote it (``CHECKED`` and the note).

With no row kept yet there is nothing to compare: the answer says so, with the key's credit in all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from core.account.replies import CreditedEpochs
from core.api.schema import CreditCheck, CreditDifference
from core.stats import LANDED_KEPT, LandedRow, Ledger, LedgerError
from core.trust.peer_id import PeerID
from core.util.clock import SYSTEM_CLOCK, Clock
from core.worker.events import PeerEpoch

log = logging.getLogger(__name__)

NOT_REPORTED = "not reported yet (the backbone reports an epoch a few seconds after it ends)"
NOT_CREDITED = (
    "not credited: the backbone never reported it for this peer, or the coordinator refused it "
    "(pass or key)"
)
HELD = (
    "not credited yet: this project pays work once a check of this computer's work has passed "
    "(its first check, or one that could not reach it), so it may still come; or the backbone "
    "never reported it, or the coordinator refused it (pass or key)"
)
DIFFERENT = "the samples differ"
NO_RECORD = (
    "credited, but this computer has no record of it (an older ledger, or another install with "
    "the same key)"
)
CHECKED = "credited less by the project's work checks"
"""Begins the reason of an epoch the checks cut or withdrew; the backbone's note follows."""
_SHORT = {
    CHECKED: "cut by the work checks",
    NOT_REPORTED: "not reported yet",
    NOT_CREDITED: "not credited",
    HELD: "not credited yet",
    DIFFERENT: "counted differently",
    NO_RECORD: "credited without a record here",
}
"""Each reason as the summary names it."""


class LandedEpochs:
    def __init__(
        self,
        ledger: Ledger,
        peer: PeerID,
        *,
        clock: Clock = SYSTEM_CLOCK,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.peer = peer
        self._ledger = ledger
        self._clock = clock
        self._on_error = on_error

    def record(self, project: str, event: PeerEpoch) -> None:
        """Keep the epoch ``event`` landed. A ledger that cannot be written is reported through
        ``on_error``: the engine's count misses the epoch, and training goes on."""
        row = LandedRow(str(self.peer), event.epoch, event.samples, self._clock.time())
        try:
            self._ledger.add_landed(project, row)
        except LedgerError as exc:
            log.error("could not record landed epoch %d of %s: %s", event.epoch, project, exc)
            if self._on_error is not None:
                self._on_error(str(exc))

    def rows(self, project: str) -> list[LandedRow]:
        """This key's landed epochs kept for ``project``, oldest first."""
        return self._ledger.landed(project, str(self.peer))


def since(rows: list[LandedRow]) -> int:
    """The epoch to ask the coordinator from: the oldest kept (0 with none: nothing is compared,
    and the answer's total is all that is read)."""
    return min((row.epoch for row in rows), default=0)


def compare(
    project: str, rows: list[LandedRow], credited: CreditedEpochs, *, checked: bool = False
) -> CreditCheck:
    """This computer's rows beside the coordinator's ``credited`` (asked from ``since(rows)``);
    ``checked``: the project checks its volunteers' work (its ``work_checks`` above 0)."""
    peer = str(credited.peer)
    if not rows:
        return CreditCheck(
            project,
            peer,
            local_samples=0,
            credited_samples=0,
            matches=True,
            summary=(
                f"Nothing to compare yet: this computer has no record of an epoch of {project} it "
                f"took part in. The project credits this computer's key with "
                f"{credited.samples:,} samples in all."
            ),
            credited_total=credited.samples,
        )
    local = {row.epoch: row.samples for row in rows}
    first = since(rows)
    theirs = {epoch: n for epoch, n in credited.epochs.items() if epoch >= first}
    epochs = set(local) | set(theirs)
    if credited.listed >= LANDED_KEPT and theirs:
        # the coordinator stopped at its limit: later epochs are beyond what it listed
        epochs = {epoch for epoch in epochs if epoch <= max(theirs)}
    differences: list[CreditDifference] = []
    for epoch in sorted(epochs):
        mine, credit = local.get(epoch, 0), theirs.get(epoch, 0)
        if mine != credit:
            if (note := credited.notes.get(epoch)) is not None:
                claimed, why = note
                reason = f"{CHECKED} ({claimed:,} samples claimed): {why}"
            else:
                reason = _reason(epoch, epoch in local, credit, credited.newest_epoch, checked)
            differences.append(CreditDifference(epoch, mine, credit, reason))
    compared = sorted(epochs)
    local_samples = sum(local.get(epoch, 0) for epoch in compared)
    credited_samples = sum(theirs.get(epoch, 0) for epoch in compared)
    return CreditCheck(
        project,
        peer,
        local_samples=local_samples,
        credited_samples=credited_samples,
        matches=not differences,
        differences=differences,
        summary=_summary(local_samples, len(compared), differences),
        epochs=len(compared),
        since=first,
        credited_total=credited.samples,
    )


def _reason(epoch: int, recorded: bool, credit: int, newest: int | None, checked: bool) -> str:
    if not recorded:
        return NO_RECORD
    if newest is None or epoch > newest:
        return NOT_REPORTED
    if credit:
        return DIFFERENT
    return HELD if checked else NOT_CREDITED


def _summary(samples: int, epochs: int, differences: list[CreditDifference]) -> str:
    if not differences:
        return f"Your counts match the project's: {samples:,} samples over {_plural(epochs)}."
    apart = sum(abs(d.local - d.credited) for d in differences)
    parts: list[str] = []
    for reason, short in _SHORT.items():
        these = [d for d in differences if d.reason.startswith(reason)]
        if these:
            gap = sum(abs(d.local - d.credited) for d in these)
            parts.append(f"{_plural(len(these))} {short} ({gap:,} samples)")
    agreeing = epochs - len(differences)
    text = f"{apart:,} samples differ: {'; '.join(parts)}."
    if agreeing:
        text += f" The other {_plural(agreeing)} {'matches' if agreeing == 1 else 'match'}."
    if all(d.reason == NOT_REPORTED for d in differences):
        text += " Check again in a minute."
    return text


def _plural(count: int) -> str:
    return f"{count:,} epoch" if count == 1 else f"{count:,} epochs"
