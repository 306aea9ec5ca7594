"""The credit audit: what the coordinator credited, against what the backbone's records show.

The backbone writes one line per epoch to ``metrics.jsonl`` (rotated as ``.1``, ``.2``), with the
samples of every user in it, and a line of its own for credit it found after the epoch went out
(``"late": true``), and one for credit it took back (``"withdrawn": true``: a peer caught faking
work). Those lines are what it reported. The audit adds them up per (epoch, user) and
compares them with the coordinator's contribution rows for the same epochs, and names a reason for
every difference it can explain: a report that never arrived, a name with no account, a banned
account, a contribution the coordinator refused (its pass or its key). It also checks the
coordinator's own three copies of each total (contribution rows, the totals row, the day rows).

Only the epochs the logs cover are compared: a log rotated away, or another backbone's reports,
are told apart from a difference (``outside``).

Where the backbone checks the trainers' work, it logs every check beside its metrics
(``checks.jsonl``): ``checked_by_user`` adds them up per user, and the audit shows each user's
checked share, the samples of the epochs whose work was recomputed over the samples recorded.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.coordinator.errors import BadRequest
from core.coordinator.people.accounts import User
from core.coordinator.people.names import Username

VERDICTS = ("passed", "caught", "unreached", "apart")
"""A check's verdicts (``core.training.credit.checks.checker.CheckRecord``)."""
MAX_LISTED = 200
"""Differences kept in a report (the rest are counted)."""


@dataclass(frozen=True, slots=True)
class Difference:
    epoch: int
    user: str
    credited: int
    recorded: int
    reason: str

    def text(self) -> str:
        return (
            f"epoch {self.epoch}: {self.user}: credited {self.credited}, the records show "
            f"{self.recorded} ({self.reason})"
        )


@dataclass(slots=True)
class Checked:
    """One user's work checks, from the backbone's ``checks.jsonl``."""

    passed: int = 0
    caught: int = 0
    unreached: int = 0
    apart: int = 0
    """Checks that could not judge: the member computed at parameters the backbone's replica
    did not hold (its claims held until a later check)."""
    samples: int = 0
    """Claimed samples of the epochs a check passed for."""


def checked_by_user(lines: Iterable[Mapping[str, Any]]) -> dict[str, Checked]:
    """The backbone's check lines added up per user (per peer for peers without one); a line
    that is not a check's raises ``BadRequest``."""
    found: dict[str, Checked] = {}
    for number, line in enumerate(lines, 1):
        verdict, claimed = line.get("verdict"), line.get("claimed")
        name = line.get("user") or line.get("peer")
        if verdict not in VERDICTS or not isinstance(name, str):
            raise BadRequest(
                f"line {number} of the checks is not a check's: {json.dumps(line)[:80]}"
            )
        if not isinstance(claimed, int) or isinstance(claimed, bool) or claimed < 0:
            raise BadRequest(f"line {number}: the check claims {claimed!r} samples")
        tally = found.setdefault(name, Checked())
        if verdict == "passed":
            tally.passed += 1
            tally.samples += claimed
        elif verdict == "caught":
            tally.caught += 1
        elif verdict == "apart":
            tally.apart += 1
        else:
            tally.unreached += 1
    return found


@dataclass(slots=True)
class Audit:
    """Per user: samples credited and samples recorded, over the epochs compared."""

    users: dict[str, tuple[int, int]] = field(default_factory=dict)
    differences: list[Difference] = field(default_factory=list)
    more_differences: int = 0
    epochs: tuple[int, int] | None = None
    """The first and last epoch compared (the logs' range); None when the logs hold none."""
    outside: int = 0
    """Epochs the coordinator has outside that range (not compared)."""
    inconsistent: list[str] = field(default_factory=list)
    """Users whose contribution rows (with their receipts' expert samples), totals row and day
    rows disagree."""
    experts: dict[str, int] = field(default_factory=dict)
    """Expert samples per user, credited by receipts (dmoe projects)."""
    vouching: dict[str, int] = field(default_factory=dict)
    """Per user with expert samples: how many other accounts signed the receipts (a sum made of
    one or two accounts' word is worth a look)."""
    failing_receipts: list[str] = field(default_factory=list)
    """Stored receipts that no longer check out (signature, project, or the credit they back)."""
    checked: dict[str, Checked] = field(default_factory=dict)
    """Per user: the backbone's work checks of its peers (``checked_by_user``)."""

    @property
    def clean(self) -> bool:
        return not (
            self.differences or self.inconsistent or self.more_differences or self.failing_receipts
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "epochs": list(self.epochs) if self.epochs else None,
            "epochs_outside": self.outside,
            "users": {u: {"credited": c, "recorded": r} for u, (c, r) in self.users.items()},
            "differences": [
                {
                    "epoch": d.epoch,
                    "user": d.user,
                    "credited": d.credited,
                    "recorded": d.recorded,
                    "reason": d.reason,
                }
                for d in self.differences
            ],
            "more_differences": self.more_differences,
            "inconsistent": self.inconsistent,
            "expert_samples": self.experts,
            "vouching_accounts": self.vouching,
            "failing_receipts": self.failing_receipts,
            "checked": {
                user: {**dataclasses.asdict(c), "share": self.checked_share(user)}
                for user, c in self.checked.items()
            },
        }

    def checked_share(self, user: str) -> float | None:
        """The user's samples in checked epochs over the samples the records show (None: no
        samples recorded)."""
        recorded = self.users.get(user, (0, 0))[1]
        found = self.checked.get(user)
        if not recorded:
            return None
        return min(1.0, (found.samples if found else 0) / recorded)


def recorded_by_epoch(lines: Iterable[Mapping[str, Any]]) -> dict[tuple[int, str], int]:
    """Samples per (epoch, name) in the backbone's metrics lines (late ones add to their epoch,
    withdrawn ones take away from it). A malformed line raises ``BadRequest``."""
    found: dict[tuple[int, str], int] = {}
    for number, line in enumerate(lines, 1):
        epoch = line.get("epoch")
        parts = line.get("contributions")
        if not isinstance(epoch, int) or isinstance(epoch, bool) or not isinstance(parts, dict):
            shown = json.dumps(line)[:80]
            raise BadRequest(f"line {number} of the metrics is not an epoch's: {shown}")
        sign = -1 if line.get("withdrawn") is True else 1
        for name, samples in parts.items():
            if not isinstance(samples, int) or isinstance(samples, bool) or samples < 0:
                raise BadRequest(f"line {number}: {name!r} has {samples!r} samples")
            key = (epoch, str(name))
            found[key] = max(0, found.get(key, 0) + sign * samples)
    return found


def audit(
    recorded: Mapping[tuple[int, str], int],
    credited: Mapping[tuple[int, str], int],
    reported_epochs: set[int],
    users: Iterable[User],
    sums: Mapping[str, tuple[int, int, int, int]],
    *,
    receipts: Mapping[str, int] | None = None,
) -> Audit:
    """Compare ``recorded`` (per (epoch, name), from ``recorded_by_epoch``) with ``credited``
    (per (epoch, user key), the coordinator's rows for the same epochs); check each user's rows
    against their totals, and the expert samples in the totals against ``receipts`` (per user
    key, what the receipt rows credited)."""
    by_key = {user.key: user for user in users}
    result = Audit()
    receipts = receipts or {}
    for key, (rows, total, days, expert) in sorted(sums.items()):
        name = by_key[key].name if key in by_key else key
        if expert:
            result.experts[name] = expert
        vouched = receipts.get(key, 0)
        if not rows + expert == total == days or vouched != expert:
            result.inconsistent.append(
                f"{name}: contributions {rows} and expert samples {expert} (receipts: {vouched}), "
                f"total {total}, days {days}"
            )
    if not recorded:
        return result
    first = min(epoch for epoch, _ in recorded)
    last = max(epoch for epoch, _ in recorded)
    result.epochs = (first, last)
    result.outside = sum(1 for e in reported_epochs if not first <= e <= last)
    shown_by_key: dict[tuple[int, str], int] = {}
    names = {user.key: user.name for user in by_key.values()}
    for (epoch, name), samples in recorded.items():
        key = _key(name)
        shown_by_key[(epoch, key)] = shown_by_key.get((epoch, key), 0) + samples
        names.setdefault(key, name)
    for epoch, key in sorted(set(shown_by_key) | set(credited)):
        got = credited.get((epoch, key), 0)
        shown = shown_by_key.get((epoch, key), 0)
        name = names.get(key, key)
        before = result.users.get(name, (0, 0))
        result.users[name] = (before[0] + got, before[1] + shown)
        if got == shown:
            continue
        reason = _reason(epoch, by_key.get(key), got, shown, reported_epochs)
        if len(result.differences) < MAX_LISTED:
            result.differences.append(Difference(epoch, name, got, shown, reason))
        else:
            result.more_differences += 1
    return result


def _key(name: str) -> str:
    try:
        return Username.parse(name).key
    except BadRequest:
        return name  # a peer without a pass is listed under its PeerID


def _reason(epoch: int, user: User | None, got: int, shown: int, reported: set[int]) -> str:
    if shown == 0:
        return "credited by a report that is not in these records (another backbone's?)"
    if epoch not in reported:
        return "the epoch's report never reached the coordinator"
    if user is None:
        return "no account has this name (a peer without a pass, or a name never registered)"
    if user.banned:
        return "the account is banned"
    if got == 0:
        return (
            "the coordinator refused it: a pass not valid then, or a peer key the account "
            "never proved"
        )
    return "the samples differ"
