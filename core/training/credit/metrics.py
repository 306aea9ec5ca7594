"""The collaboration's metrics per epoch, aggregated from everyone's progress records.

Each peer's record carries the loss totals of the last epoch it finished. The loss of an epoch is the
sum of all peers' losses over the sum of their mini-steps (so a fast peer weighs as much as its work);
samples and speed are summed; alive peers are the trainers with fresh records. An epoch is reported
once, a short grace after a record first lists it as landed (so that slower peers' parts are
included), or when the trainers have gone past it without landing it.

Each report also lists every peer's part of the epoch (its samples, an estimate of its compute time,
and in moderated projects the pass naming its user): what the coordinator's leaderboard counts, so the
leaderboard and these metrics add up to the same samples. The parts come from the records' landed
epochs (``book``): an epoch that no record names as its last finished one is still
reported, and a part found after its epoch went out is reported late (``late_credit``). The report
carries the epoch's loss, speed and alive peers too, for the coordinator's project page.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.config.roles import BACKBONE
from core.training.credit.book import CreditBook, Share, Support
from core.training.progress import Landed, PeerProgress
from core.trust.passes import AccessPass
from core.trust.reports import Contribution, EpochFigures, EpochReport
from core.util.process.logfiles import JSON_LINES_BACKUPS, read_json_lines, rotate_if_over


@dataclass(frozen=True)
class PeerContribution:
    """One peer's part of a completed epoch."""

    peer: str
    samples: int
    compute_seconds: float
    """Estimated as samples over the peer's reported speed."""
    access: AccessPass | None = None
    """The peer's pass (moderated projects): which user the samples belong to."""
    claimed: int | None = None
    """What its records claimed, where the work checks credited less (None: as claimed)."""
    note: str = ""
    """Why the checks credited less."""

    @property
    def username(self) -> str | None:
        return None if self.access is None else self.access.username


@dataclass(frozen=True)
class EpochMetrics:
    epoch: int
    loss: float | None
    """None when no peer reported a finite loss for this epoch."""
    samples: int
    samples_per_second: float
    alive_peers: int
    time: float
    contributions: tuple[PeerContribution, ...] = ()
    """Per peer; their samples add up to ``samples``."""
    late: bool = False
    """Credit found after the epoch was reported (a record read late, or a gone peer's share of a
    round): only these contributions, to be added to the epoch's; no figures."""
    withdrawn: bool = False
    """Credit taken back from an epoch already reported (its peer was caught faking work): these
    contributions' samples are subtracted from the epoch's; no figures."""

    def summary(self) -> dict[str, object]:
        """The metrics as plain JSON values; contributions by user (passes left out)."""
        data = asdict(self)
        data["contributions"] = self.by_user()
        return data

    def by_user(self) -> dict[str, int]:
        """Samples per username (per peer for peers without one)."""
        by_user: dict[str, int] = {}
        for part in self.contributions:
            name = part.username or part.peer
            by_user[name] = by_user.get(name, 0) + part.samples
        return by_user

    def to_json(self) -> str:
        return json.dumps(self.summary(), sort_keys=True)

    def contribution_report(self) -> dict[str, Any]:
        """The coordinator's ``/contributions`` body for this epoch (``core.trust.reports``): the
        figures its project page shows, each within its bound or null, and the contributions of
        peers with a pass."""
        figures = None
        if not (self.late or self.withdrawn):
            figures = EpochFigures.within_bounds(
                self.epoch, self.time, self.loss, self.samples_per_second, self.alive_peers
            )
        contributions = tuple(
            Contribution(
                part.peer, part.access, part.samples, part.compute_seconds, part.claimed, part.note
            )
            for part in self.contributions
            if part.access is not None
        )
        return EpochReport(
            self.epoch,
            self.time,
            self.samples,
            contributions,
            figures,
            late=self.late,
            withdrawn=self.withdrawn,
        ).to_json()


@dataclass
class _Totals:
    by_peer: dict[str, PeerProgress] = field(default_factory=dict)
    landed_at: float | None = None
    """When a record first listed this epoch as landed; the grace runs from then."""


class MetricsAggregator:
    def __init__(
        self, grace: float = 1.0, *, after_epoch: int = -1, support: Support | None = None
    ) -> None:
        """``after_epoch``: epochs up to this one are never reported (a peer that joins late sets
        it, so that lagging peers' records of long-finished epochs, whose totals it can no longer
        see complete, do not become points of its curve); ``support``: what the backbone's work
        checks support of each share (``CreditBook``; None: every claim as made)."""
        self.grace = grace
        self._pending: dict[int, _Totals] = {}
        # a record's epoch -1 means "none finished yet": never an epoch to report, whatever the floor
        self._reported = max(-1, after_epoch)
        self.credit = CreditBook(support)
        """Which peers were credited for which epochs (``book``)."""
        self.late_shares = 0
        """Shares credited after their epoch's metrics went out."""
        self._first = True

    def witness(self, epoch: int, weights: Mapping[str, float], now: float) -> None:
        """A round of ``epoch`` averaged these senders' weights: evidence for a sender that is
        gone before its record says what landed."""
        self.credit.witness(epoch, weights, now)

    def observe(self, records: list[PeerProgress], now: float) -> list[EpochMetrics]:
        """Take fresh records; return the epochs that are now complete, oldest first."""
        ours = [r for r in records if r.role != BACKBONE]
        if self._first and ours:
            # the epochs listed as landed before we came (a backbone restarted): their credit goes
            # out as late (the coordinator counts each once); they are no new points of the curve
            self._first = False
            self._reported = max(self._reported, max(r.last_epoch for r in ours) - 1)
        for record in ours:
            landed = record.landed
            if landed is None:  # a release that listed none: its last finished epoch, as it says
                landed = (Landed(record.last_epoch, record.last_samples),)
            self.credit.claim(record.peer, landed, record.access, record.samples_per_second)
            for item in landed:
                if item.epoch > self._reported:
                    listed = self._pending.setdefault(item.epoch, _Totals())
                    if listed.landed_at is None:
                        listed.landed_at = now
            epoch = record.last_epoch
            if epoch > self._reported:
                totals = self._pending.setdefault(epoch, _Totals())
                totals.by_peer[record.peer] = record
        self.credit.settle_witnesses((r.peer for r in records), now)
        trainers = [r for r in records if r.training]
        speed = sum(r.samples_per_second for r in trainers)
        newest = max((r.last_epoch for r in trainers), default=-1)
        done = []
        for epoch in sorted(self._pending):
            totals = self._pending[epoch]
            # An epoch is complete a grace after its work first landed, or once the trainers have
            # gone past it. Finished is not landed: a diloco round that formed no group leaves
            # its trainers at the epoch, to land it in the next try, and reporting it then would
            # leave its credit to a late report and its line with no samples.
            landed_at = totals.landed_at
            if epoch >= newest and (landed_at is None or now - landed_at < self.grace):
                break
            done.append(self._finish(epoch, totals, speed, len(trainers), now))
        return done

    def late_credit(self, now: float) -> list[EpochMetrics]:
        """Credit found for epochs already reported (``EpochMetrics.late``), oldest first: what
        records listed after their epoch's metrics went out, and gone peers' shares of rounds."""
        found = []
        for epoch, shares in self.credit.late(self._reported, now).items():
            self.late_shares += len(shares)
            parts = tuple(_part(share) for share in shares)
            samples = sum(part.samples for part in parts)
            found.append(EpochMetrics(epoch, None, samples, 0.0, 0, now, parts, late=True))
        return found

    def withdraw(self, peer: str, after: int, now: float) -> list[EpochMetrics]:
        """Take back ``peer``'s credit for the epochs after ``after`` (``CreditBook.withdraw``):
        one ``EpochMetrics.withdrawn`` per epoch, oldest first."""
        return [
            EpochMetrics(epoch, None, share.samples, 0.0, 0, now, (_part(share),), withdrawn=True)
            for epoch, share in self.credit.withdraw(peer, after).items()
        ]

    def _finish(
        self, epoch: int, totals: _Totals, speed: float, alive: int, now: float
    ) -> EpochMetrics:
        del self._pending[epoch]
        self._reported = max(self._reported, epoch)
        for stale in [e for e in self._pending if e <= epoch]:
            del self._pending[stale]
        records = totals.by_peer.values()
        loss_sum = sum(r.last_loss_sum for r in records)
        steps = sum(r.last_mini_steps for r in records)
        loss = loss_sum / steps if steps and math.isfinite(loss_sum) else None
        parts = tuple(_part(share) for share in self.credit.take(epoch, now))
        samples = sum(part.samples for part in parts)
        return EpochMetrics(epoch, loss, samples, round(speed, 1), alive, now, parts)


def _part(share: Share) -> PeerContribution:
    seconds = share.samples / share.speed if share.speed > 0 else 0.0
    return PeerContribution(
        share.peer, share.samples, seconds, share.access, share.claimed, share.note
    )


METRICS_MAX_BYTES = 8_000_000
"""Where ``metrics.jsonl`` is rotated: an epoch's line lists every peer's part (a few hundred bytes
each), so this holds thousands of epochs of a large collaboration; older ones live on in the
checkpoints and the coordinator's leaderboard."""
METRICS_BACKUPS = JSON_LINES_BACKUPS


class MetricsLog:
    """Appends one JSON line per epoch (a file any tool can tail), rotated between two lines past
    ``METRICS_MAX_BYTES`` (``metrics.jsonl.1``, ``.2``: every file holds whole lines)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, metrics: EpochMetrics) -> None:
        self._append(metrics.to_json())

    def write_record(self, record: Mapping[str, Any]) -> None:
        """Any other JSON object, one line (a held-out evaluation's, in its own log)."""
        self._append(json.dumps(dict(record)))

    def _append(self, line: str) -> None:
        rotate_if_over(self.path, METRICS_MAX_BYTES, METRICS_BACKUPS)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")

    def records(self) -> list[dict[str, Any]]:
        """Every epoch still kept, oldest first, across the rotated files (unreadable lines, as a
        crash mid-write leaves, skipped)."""
        return read_json_lines(self.path, METRICS_BACKUPS)
