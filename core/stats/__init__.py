"""The contribution ledger: what this computer gave to each project, hour by hour.

- ``work_done``  ``WorkDone`` (amounts to add or totals read) and ``HourRow`` (one stored row).
- ``ledger``        ``Ledger``: per project and UTC hour totals in SQLite, and the queries over them.
- ``epochs``        ``EpochRow``: the collaboration's completed epochs (the loss curve), newest kept.
- ``held_out``      ``HeldOutRow``: the backbone's held-out evaluations, newest kept.
- ``landed``        ``LandedRow``: this computer's landed epochs (its own count, to compare with the
  coordinator's credit), newest kept.
- ``newest``        the queries the keep-the-newest tables share: prune, read the newest back.
- ``meter``         ``WorkMeter``: sums the engine's deltas in memory between ledger writes.
- ``schema``        opening the file safely (WAL, schema version, refusing files that are not ours).
- ``buckets``       which UTC hour, local day and local month a moment belongs to.
- ``errors``        ``LedgerError``.
"""

from core.stats.epochs import EPOCHS_KEPT, EpochRow
from core.stats.errors import LedgerError
from core.stats.held_out import HeldOutRow
from core.stats.landed import LANDED_KEPT, LandedRow
from core.stats.ledger import Ledger
from core.stats.meter import WorkMeter
from core.stats.work_done import HourRow, WorkDone

__all__ = [
    "EPOCHS_KEPT",
    "LANDED_KEPT",
    "EpochRow",
    "HeldOutRow",
    "HourRow",
    "LandedRow",
    "Ledger",
    "LedgerError",
    "WorkDone",
    "WorkMeter",
]
