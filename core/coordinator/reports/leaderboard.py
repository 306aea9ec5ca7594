"""Leaderboard queries: the top contributors, one user's standing and neighbours, daily history.

Ranking is by samples (descending), ties by the case-folded username, so every contributor has one
distinct rank. Banned users are left out of ranks and lists; the collaboration's totals still count
their samples, so that the totals reconcile with the epochs the backbone reported. A user's
percentile is the share of ranked contributors at or below their rank (rank 1 of 4 is 100, rank 4
of 4 is 25). History is per UTC day, oldest first, with days without contributions as zeros.

In a mixture-of-experts project the samples an account's expert servers computed for other
accounts' trainers, as their signed receipts vouch (``receipts``), count among its samples and rank
with them; ``expert_samples`` says how many of them they are.
"""

from __future__ import annotations

import datetime
import sqlite3
from dataclasses import dataclass
from typing import Any

from core.coordinator.reports.records import Contributions, Passes, utc_day

ACTIVE_WINDOW = 15 * 60.0
"""A device is active if it contributed to an epoch that ended this recently."""
NEIGHBOURS = 2

_RANKED = (
    "SELECT totals.user_key, users.name, totals.samples, totals.compute_seconds, "
    "totals.last_seen, totals.expert_samples FROM totals JOIN users ON users.key = totals.user_key "
    "WHERE users.banned = 0"
)
_AHEAD = "(totals.samples > ? OR (totals.samples = ? AND totals.user_key < ?))"
_BEHIND = "(totals.samples < ? OR (totals.samples = ? AND totals.user_key > ?))"


@dataclass(frozen=True, slots=True)
class Row:
    key: str
    name: str
    samples: int
    compute_seconds: float
    last_seen: float
    expert_samples: int
    """The part of ``samples`` credited by receipts for expert work."""


class Leaderboard:
    def __init__(
        self, conn: sqlite3.Connection, contributions: Contributions, passes: Passes
    ) -> None:
        self._conn = conn
        self._contributions = contributions
        self._passes = passes

    def top(self, limit: int, now: float) -> list[dict[str, Any]]:
        rows = self._rows(f"{_RANKED} ORDER BY totals.samples DESC, totals.user_key LIMIT ?", limit)
        return self._entries(rows, 1, now)

    def totals(self) -> dict[str, Any]:
        samples, compute, experts = self._conn.execute(
            "SELECT COALESCE(sum(samples), 0), COALESCE(sum(compute_seconds), 0.0), "
            "COALESCE(sum(expert_samples), 0) FROM totals"
        ).fetchone()
        epochs, _ = self._contributions.epoch_totals()
        return {
            "samples": int(samples),
            "expert_samples": int(experts),
            "compute_seconds": float(compute),
            "users": self._ranked_count(),
            "epochs": epochs,
        }

    def me(self, user_key: str, name: str, now: float) -> dict[str, Any]:
        rows = self._rows(f"{_RANKED} AND totals.user_key = ?", user_key)
        history = {"7d": self.history(user_key, 7, now), "30d": self.history(user_key, 30, now)}
        if not rows:
            return {
                "username": name,
                "rank": None,
                "percentile": None,
                "samples": 0,
                "expert_samples": 0,
                "compute_seconds": 0.0,
                "above": [],
                "below": [],
                "history": history,
            }
        mine = rows[0]
        position = (mine.samples, mine.samples, mine.key)
        ahead = self._conn.execute(
            f"SELECT count(*) FROM ({_RANKED} AND {_AHEAD})", position
        ).fetchone()[0]
        rank = int(ahead) + 1
        count = self._ranked_count()
        above = self._rows(
            f"{_RANKED} AND {_AHEAD} ORDER BY totals.samples ASC, totals.user_key DESC LIMIT ?",
            *position,
            NEIGHBOURS,
        )[::-1]
        below = self._rows(
            f"{_RANKED} AND {_BEHIND} ORDER BY totals.samples DESC, totals.user_key LIMIT ?",
            *position,
            NEIGHBOURS,
        )
        return {
            "username": mine.name,
            "rank": rank,
            "percentile": round(100.0 * (count - rank + 1) / count, 1),
            "samples": mine.samples,
            "expert_samples": mine.expert_samples,
            "compute_seconds": mine.compute_seconds,
            "above": self._entries(above, rank - len(above), now),
            "below": self._entries(below, rank + 1, now),
            "history": history,
        }

    def history(self, user_key: str, days: int, now: float) -> list[dict[str, Any]]:
        last = utc_day(now)
        first = last - days + 1
        found = {
            int(day): (int(samples), float(compute), int(expert))
            for day, samples, compute, expert in self._conn.execute(
                "SELECT day, samples, compute_seconds, expert_samples FROM days "
                "WHERE user_key = ? AND day BETWEEN ? AND ?",
                (user_key, first, last),
            ).fetchall()
        }
        out = []
        for day in range(first, last + 1):
            samples, compute, expert = found.get(day, (0, 0.0, 0))
            label = datetime.date.fromordinal(_EPOCH_ORDINAL + day).isoformat()
            out.append(
                {
                    "day": label,
                    "samples": samples,
                    "expert_samples": expert,
                    "compute_seconds": compute,
                }
            )
        return out

    def _ranked_count(self) -> int:
        return int(self._conn.execute(f"SELECT count(*) FROM ({_RANKED})").fetchone()[0])

    def _rows(self, sql: str, *params: object) -> list[Row]:
        return [Row(*row) for row in self._conn.execute(sql, params).fetchall()]

    def _entries(self, rows: list[Row], first_rank: int, now: float) -> list[dict[str, Any]]:
        keys = [row.key for row in rows]
        active = self._contributions.active_devices(now - ACTIVE_WINDOW, keys)
        devices = self._passes.devices(keys)
        return [
            {
                "rank": first_rank + i,
                "username": row.name,
                "samples": row.samples,
                "expert_samples": row.expert_samples,
                "compute_seconds": row.compute_seconds,
                "active_devices": active.get(row.key, 0),
                "devices": devices.get(row.key, 0),
                "last_seen": row.last_seen,
            }
            for i, row in enumerate(rows)
        ]


_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
