"""Checked work: credit for what the checks support. In dedloc trainers keep a receipt of every
microbatch and the backbone recomputes a few; in diloco, whose microbatches no checker can
recompute, the backbone scores each round's updates against the claims.

- ``receipts``     WorkReceipt (samples, batch digest, loss, gradient fingerprint, parameter
  epoch), the calls that fetch an epoch's receipts and one batch, and their bounds.
- ``fingerprint``  the fixed coordinates a gradient is read at, batch digests, batches packed for
  the wire.
- ``judge``        whether a recomputed microbatch matches its receipt: tolerances per precision.
- ``ledger``       WorkLedger: a trainer's receipts of its recent epochs, served to checkers.
- ``standing``     Standings: which epochs to check, and what of each claim the checks support
  (a newcomer's credit waits for its first check).
- ``checker``      WorkChecker: the backbone's spot checks, their evidence, their log lines.
- ``contribution`` ContributionScores (diloco): what a member's updates show per sample claimed,
  and the credit, accusations and waits that follow from it.
"""

from core.training.work.checker import CheckRecord, WorkChecker
from core.training.work.ledger import Entry, Forgery, Recorder, WorkLedger
from core.training.work.standing import Standings

__all__ = ["CheckRecord", "Entry", "Forgery", "Recorder", "Standings", "WorkChecker", "WorkLedger"]
