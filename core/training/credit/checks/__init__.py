"""Checked work (dedloc): a trainer keeps a receipt of every microbatch, the backbone recomputes a
few, and credit follows what the checks support. (Diloco's single microbatches no checker can
recompute: its rounds are replayed whole where they start at the anchor,
``core.training.diloco.checks``, whose credit follows these ``Standings`` too, and scored otherwise,
``core.training.credit.scores``.)

- ``receipts``     WorkReceipt (samples, batch digest, loss, gradient fingerprint, parameter
  epoch), the calls that fetch an epoch's receipts and one batch, and their bounds.
- ``fingerprint``  the fixed coordinates a gradient is read at, batch digests, batches packed for
  the wire.
- ``tolerance``    whether a recomputed microbatch matches its receipt: tolerances per precision.
- ``ledger``       WorkLedger: a trainer's receipts of its recent epochs, served to checkers.
- ``standing``     Standings: which epochs to check, and what of each claim the checks support
  (a newcomer's credit waits for its first check).
- ``checker``      WorkChecker: the backbone's spot checks, their evidence, their log lines.
"""

from core.training.credit.checks.checker import CheckRecord, WorkChecker
from core.training.credit.checks.ledger import Entry, Forgery, Recorder, WorkLedger
from core.training.credit.checks.standing import Standings

__all__ = ["CheckRecord", "Entry", "Forgery", "Recorder", "Standings", "WorkChecker", "WorkLedger"]
