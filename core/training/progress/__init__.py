"""Progress records: what every peer says of itself in the DHT, and the collaboration's view built
from them.

- ``record``   PeerProgress (a peer's epoch, samples, speed, role, loss totals, pass, the landed
  epochs, a diloco anchor's digest) and its wire form; HeldOut, the backbone's newest evaluation.
- ``landed``   Landed: the epochs whose work a peer saw land, as its record lists them (what the
  credit book credits), and LandedLog, the peer's own side.
- ``tally``    StepTally: a peer's work since its last report point.
- ``confirmed`` Confirmation (what a confirming key signs: epoch, state digest, the round's
  members), Confirmed and the rules that decide it (``confirm``, ``by_records``), Strikes (peers
  that keep announcing what nothing confirms).
- ``board``    ProgressBoard (publish ours, read everyone's and the newest confirmation),
  CollaborationView.
"""

from core.training.progress.board import (
    KEEPALIVE,
    RECORD_TTL,
    CollaborationView,
    ProgressBoard,
    pass_carrying_schema,
)
from core.training.progress.confirmed import Confirmation, Confirmed
from core.training.progress.landed import MAX_SAMPLES, RECENT, Landed, LandedLog
from core.training.progress.record import (
    LEFT,
    MAX_HELD_OUT_LOSS,
    PAUSED,
    RECORD_ROLES,
    HeldOut,
    PeerProgress,
)
from core.training.progress.tally import StepTally

__all__ = [
    "KEEPALIVE",
    "LEFT",
    "MAX_HELD_OUT_LOSS",
    "MAX_SAMPLES",
    "PAUSED",
    "RECENT",
    "RECORD_ROLES",
    "RECORD_TTL",
    "CollaborationView",
    "Confirmation",
    "Confirmed",
    "HeldOut",
    "Landed",
    "LandedLog",
    "PeerProgress",
    "ProgressBoard",
    "StepTally",
    "pass_carrying_schema",
]
