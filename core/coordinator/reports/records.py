"""What peers did: passes handed out (per user and peer key) and contributions per finished epoch.

``Passes`` remembers, for each (user, peer key), when it first got a pass and when its latest pass
expires: enough to count a user's devices and to publish the peer keys of banned users while their
passes could still admit them. Both read only the keys the user proved (``peer_keys``): rows from
before schema 2 may name keys their user never held, and must not get those revoked or counted.

``Contributions`` stores each epoch the backbone reports and each peer's share in it;
(epoch, peer) is the primary key, so a report sent twice counts once. The per-user totals and
UTC-day rows the leaderboard reads are updated in the same transaction as the contribution they
add, so they always agree with the contribution rows. A share the backbone withdraws (its
peer was caught faking work) keeps its row at zero samples: a withdrawal sent twice takes nothing
more, and the epoch's report sent again cannot add the share back.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from core.coordinator.schema import transaction

DAY = 86400.0


def utc_day(when: float) -> int:
    """Days since 1970-01-01 (UTC) of a Unix time."""
    return int(when // DAY)


@dataclass(frozen=True, slots=True)
class Counted:
    """One peer's accepted share of an epoch, attributed to the user its pass names."""

    peer: str
    user_key: str
    samples: int
    compute_seconds: float
    claimed: int | None = None
    """What its records claimed, where the work checks credited less (None: as claimed)."""
    note: str = ""
    """Why the checks credited less."""


class Passes:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def record(self, user_key: str, peer: str, issued: float, expires: float) -> None:
        with transaction(self._conn):
            self._conn.execute(
                "INSERT INTO passes (user_key, peer, first_issued, expires) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (user_key, peer) DO UPDATE SET "
                "expires = max(expires, excluded.expires)",
                (user_key, peer, issued, expires),
            )

    def revoked(self, now: float) -> list[str]:
        """Keys of banned users that they proved and hold a pass for that has not expired."""
        rows = self._conn.execute(
            "SELECT DISTINCT passes.peer FROM passes JOIN users ON users.key = passes.user_key "
            "JOIN peer_keys ON peer_keys.peer = passes.peer AND peer_keys.user_key = users.key "
            "WHERE users.banned = 1 AND passes.expires > ? ORDER BY passes.peer",
            (now,),
        ).fetchall()
        return [str(row[0]) for row in rows]

    def devices(self, user_keys: Sequence[str]) -> dict[str, int]:
        """How many peer keys (proved by the user) got passes, per user."""
        counts: dict[str, int] = {}
        for chunk in _chunks(user_keys):
            marks = ", ".join("?" for _ in chunk)
            counts.update(
                self._conn.execute(
                    "SELECT passes.user_key, count(*) FROM passes JOIN peer_keys "
                    "ON peer_keys.peer = passes.peer AND peer_keys.user_key = passes.user_key "
                    f"WHERE passes.user_key IN ({marks}) GROUP BY passes.user_key",
                    chunk,
                ).fetchall()
            )
        return counts


WITHDRAWN_NOTE = (
    "withdrawn: what this peer was credited on trust since its last passed work check was taken "
    "back, because a later check caught it faking work or could not reach it while it kept that "
    "work"
)
"""The note of a withdrawn share whose report gave no reason (a backbone of an older release)."""


def withdrawn_note(reason: str) -> str:
    """The note a withdrawn share keeps: the backbone's reason, else the general one."""
    return f"withdrawn: {reason}" if reason else WITHDRAWN_NOTE


class Contributions:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def record(
        self,
        epoch: int,
        time: float,
        samples: int,
        counted: Iterable[Counted],
        *,
        late: bool = False,
    ) -> int:
        """Store an epoch and its contributions; returns how many were new (not seen before).

        ``late``: contributions found after the epoch was reported; the epoch's samples grow by
        those that are new (a late report sent twice adds nothing the second time)."""
        day = utc_day(time)
        added = 0
        added_samples = 0
        with transaction(self._conn):
            self._conn.execute(
                "INSERT INTO epochs (epoch, samples, time) VALUES (?, ?, ?) "
                "ON CONFLICT (epoch) DO NOTHING",
                (epoch, 0 if late else samples, time),
            )
            for item in counted:
                inserted = self._conn.execute(
                    "INSERT INTO contributions "
                    "(epoch, peer, user_key, samples, compute_seconds, time, claimed, note) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (epoch, peer) DO NOTHING",
                    (
                        epoch,
                        item.peer,
                        item.user_key,
                        item.samples,
                        item.compute_seconds,
                        time,
                        item.claimed,
                        item.note or None,
                    ),
                ).rowcount
                if not inserted:
                    continue
                added += 1
                added_samples += item.samples
                self._conn.execute(
                    "INSERT INTO totals (user_key, samples, compute_seconds, last_seen) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (user_key) DO UPDATE SET "
                    "samples = samples + excluded.samples, "
                    "compute_seconds = compute_seconds + excluded.compute_seconds, "
                    "last_seen = max(last_seen, excluded.last_seen)",
                    (item.user_key, item.samples, item.compute_seconds, time),
                )
                self._conn.execute(
                    "INSERT INTO days (user_key, day, samples, compute_seconds) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (user_key, day) DO UPDATE SET "
                    "samples = samples + excluded.samples, "
                    "compute_seconds = compute_seconds + excluded.compute_seconds",
                    (item.user_key, day, item.samples, item.compute_seconds),
                )
            if late and added_samples:
                self._conn.execute(
                    "UPDATE epochs SET samples = samples + ? WHERE epoch = ?",
                    (added_samples, epoch),
                )
        return added

    def withdraw(self, epoch: int, reasons: Mapping[str, str]) -> int:
        """Zero these peers' contributions to ``epoch`` (``reasons``: each peer's, in words, or
        "") and take their samples and compute time off the totals, the days they were added to
        and the epoch; returns the samples taken."""
        taken = 0
        with transaction(self._conn):
            for peer, reason in reasons.items():
                row = self._conn.execute(
                    "SELECT user_key, samples, compute_seconds, time FROM contributions "
                    "WHERE epoch = ? AND peer = ?",
                    (epoch, peer),
                ).fetchone()
                if row is None or (row[1] == 0 and row[2] == 0):
                    continue
                user_key, samples, seconds, time = row
                self._conn.execute(
                    "UPDATE contributions SET samples = 0, compute_seconds = 0, "
                    "claimed = COALESCE(claimed, samples), note = ? "
                    "WHERE epoch = ? AND peer = ?",
                    (withdrawn_note(reason), epoch, peer),
                )
                self._conn.execute(
                    "UPDATE totals SET samples = samples - ?, compute_seconds = compute_seconds - ? "
                    "WHERE user_key = ?",
                    (samples, seconds, user_key),
                )
                self._conn.execute(
                    "UPDATE days SET samples = samples - ?, compute_seconds = compute_seconds - ? "
                    "WHERE user_key = ? AND day = ?",
                    (samples, seconds, user_key, utc_day(time)),
                )
                self._conn.execute(
                    "UPDATE epochs SET samples = max(0, samples - ?) WHERE epoch = ?",
                    (samples, epoch),
                )
                taken += int(samples)
        return taken

    def active_devices(self, since: float, user_keys: Sequence[str]) -> dict[str, int]:
        """Distinct peers with a contribution at or after ``since``, per user."""
        counts: dict[str, int] = {}
        for chunk in _chunks(user_keys):
            marks = ", ".join("?" for _ in chunk)
            counts.update(
                self._conn.execute(
                    "SELECT user_key, count(DISTINCT peer) FROM contributions "
                    f"WHERE time >= ? AND user_key IN ({marks}) GROUP BY user_key",
                    (since, *chunk),
                ).fetchall()
            )
        return counts

    def by_epoch_and_user(self, first: int, last: int) -> dict[tuple[int, str], int]:
        """Samples credited per (epoch, user key) for epochs ``first`` to ``last``."""
        rows = self._conn.execute(
            "SELECT epoch, user_key, sum(samples) FROM contributions "
            "WHERE epoch BETWEEN ? AND ? GROUP BY epoch, user_key",
            (first, last),
        ).fetchall()
        return {(int(epoch), str(user)): int(samples) for epoch, user, samples in rows}

    def reported_epochs(self) -> set[int]:
        """Every epoch a report (or a late one) reached us for."""
        return {int(row[0]) for row in self._conn.execute("SELECT epoch FROM epochs")}

    def sums_by_user(self) -> dict[str, tuple[int, int, int, int]]:
        """Per user key: samples in contribution rows, in the totals row, in the day rows, and the
        totals row's expert samples (credited by receipts). Rows plus expert samples, the total and
        the days agree unless the file was changed by hand or a write was torn."""
        found: dict[str, list[int]] = {}
        for query, column in (
            ("SELECT user_key, sum(samples) FROM contributions GROUP BY user_key", 0),
            ("SELECT user_key, samples FROM totals", 1),
            ("SELECT user_key, sum(samples) FROM days GROUP BY user_key", 2),
            ("SELECT user_key, expert_samples FROM totals", 3),
        ):
            for user, samples in self._conn.execute(query):
                found.setdefault(str(user), [0, 0, 0, 0])[column] = int(samples)
        return {user: (a, b, c, d) for user, (a, b, c, d) in found.items()}

    def epoch_totals(self) -> tuple[int, int]:
        """How many epochs were reported, and the samples the backbone counted in them."""
        count, samples = self._conn.execute(
            "SELECT count(*), COALESCE(sum(samples), 0) FROM epochs"
        ).fetchone()
        return int(count), int(samples)


def _chunks(keys: Sequence[str], size: int = 500) -> Iterable[Sequence[str]]:
    # SQLite limits bound parameters per statement; the leaderboard asks for up to 1000 users.
    for start in range(0, len(keys), size):
        yield keys[start : start + size]
