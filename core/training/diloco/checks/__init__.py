"""Checked rounds (diloco): a member files a receipt of each round it computes, the backbone
replays a few, and credit follows what the replays support (``credit.checks.standing``).

- ``replay``    a round replayed on a checker's replica, and how near a member's work must come.
- ``receipts``  RoundReceipt (where the round began, each inner step's batch digest, the work's
  block digests) and the calls that fetch it, a batch and a block of work; their bounds.
- ``ledger``    RoundLedger: a trainer's receipts of its last rounds, served to checkers.
- ``checker``   RoundChecker: the backbone's draws, replays and verdicts, and their evidence;
  the rounds it hands to trainers to replay, its audits of them.
- ``replayer``  RoundReplayer: a trusted trainer replays a member's round when the backbone asks.
- ``helpers``   Helpers: the trainers the backbone may hand a round to, their rests and shares.
- ``anchors``   Anchors: the outer states a replayer keeps by epoch, where a round's replay starts.
- ``fetch``     the member's batches of a round, each the one its receipt names.
- ``sketch``    what a replayer answers of the blocks drawn: a count sketch under a drawn key.
- ``credit``    RoundCredit: a claim cut to its round's weight, then what the replays support,
  then, for a round no replay can judge, the allowance.
- ``allowance`` Allowance: what rounds no replay can judge may be paid, a share of those one can.
"""

from core.training.diloco.checks.checker import RoundChecker
from core.training.diloco.checks.ledger import RoundLedger, Start

__all__ = ["RoundChecker", "RoundLedger", "Start"]
