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
- ``linger``       Linger: a stopping trainer answers the checks of its last rounds a few seconds
  more (both modes' ledgers).
- ``standing``     Standings: which epochs to check, and what of each claim the checks support
  (a newcomer's credit waits for its first check; a check that could not reach its member is
  made again, then expires).
- ``budget``       Budget: a share of the checker's time, as a bucket the checks empty (the
  random checks' 5 %, the newcomers' half).
- ``verdict``      Verdicts: which members a landed round draws, and how what a check found (in
  either mode) becomes a verdict, a standing, a record and signed evidence; CheckRecord.
- ``checker``      WorkChecker: the backbone's spot checks of dedloc's microbatches.
"""

from core.training.credit.checks.checker import WorkChecker
from core.training.credit.checks.ledger import Entry, Forgery, Recorder, WorkLedger
from core.training.credit.checks.standing import Standings
from core.training.credit.checks.verdict import CheckRecord

__all__ = ["CheckRecord", "Entry", "Forgery", "Recorder", "Standings", "WorkChecker", "WorkLedger"]
