"""Checked work: trainers keep a receipt of every microbatch, the backbone recomputes a few, and
credit waits for what the checks support (dedloc mode).

- ``receipts``     WorkReceipt (samples, batch digest, loss, gradient fingerprint, parameter
  epoch), the calls that fetch an epoch's receipts and one batch, and their bounds.
- ``fingerprint``  the fixed coordinates a gradient is read at, batch digests, batches packed for
  the wire.
- ``judge``        whether a recomputed microbatch matches its receipt: tolerances per precision.
- ``ledger``       WorkLedger: a trainer's receipts of its recent epochs, served to checkers.
- ``standing``     Standings: which epochs to check, and what of each claim the checks support
  (a newcomer's credit waits for its first check).
- ``checker``      WorkChecker: the backbone's spot checks, their evidence, their log lines.
"""

from core.training.work.checker import CheckRecord, WorkChecker
from core.training.work.ledger import Entry, Forgery, Recorder, WorkLedger
from core.training.work.standing import Standings

__all__ = ["CheckRecord", "Entry", "Forgery", "Recorder", "Standings", "WorkChecker", "WorkLedger"]
