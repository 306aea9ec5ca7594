"""The accusations the coordinator accepted (``evidence`` table), and what moderators read of them.

Rows are written only by the ``/evidence`` endpoint, after ``evidence.EvidenceJudge`` checked each
one. The listing groups them by accused peer, names the account that proved the peer's key (looked
up when read, so a key proved after the accusation is still named), and counts distinct reporting
*accounts*: one user's many peer keys are one voice.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from core.coordinator.schema import transaction
from core.trust.evidence import Evidence


@dataclass(frozen=True, slots=True)
class Accepted:
    """An accusation that passed the checks, with the account that vouches for its reporter."""

    evidence: Evidence
    reporter_user: str


@dataclass(frozen=True, slots=True)
class Accused:
    """Everything held against one peer key."""

    peer: str
    username: str | None
    """The account that proved this key, if any did."""
    banned: bool
    findings: int
    reporters: int
    """Distinct reporting accounts."""
    reporter_peers: int
    statistics: list[str]
    first_seen: float
    last_seen: float
    latest_reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "peer": self.peer,
            "username": self.username,
            "banned": self.banned,
            "findings": self.findings,
            "reporters": self.reporters,
            "reporter_peers": self.reporter_peers,
            "statistics": self.statistics,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "latest_reason": self.latest_reason,
        }


class EvidenceRecords:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def record(self, accepted: Iterable[Accepted], received: float) -> int:
        """Store accusations; returns how many were new (a resent one is kept once)."""
        added = 0
        with transaction(self._conn):
            for item in accepted:
                e = item.evidence
                added += self._conn.execute(
                    "INSERT INTO evidence (reporter, accused, group_id, part, chunk, statistic, "
                    "reporter_user, round, epoch, value, reason, time, received, signature) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT DO NOTHING",
                    (
                        str(e.reporter),
                        str(e.accused),
                        e.group,
                        e.part,
                        e.chunk,
                        e.statistic,
                        item.reporter_user,
                        e.round_key,
                        e.epoch,
                        e.value,
                        e.reason,
                        e.time,
                        received,
                        e.signature,
                    ),
                ).rowcount
        return added

    def received_since(self, reporter_user: str, since: float) -> int:
        """Rows stored for accusations vouched for by ``reporter_user`` since ``since``."""
        row = self._conn.execute(
            "SELECT count(*) FROM evidence WHERE reporter_user = ? AND received >= ?",
            (reporter_user, since),
        ).fetchone()
        return int(row[0])

    def accused(self, limit: int = 1000) -> list[Accused]:
        """Accused peers, most distinct reporting accounts first."""
        rows = self._conn.execute(
            "SELECT e.accused, u.name, u.banned, count(*), count(DISTINCT e.reporter_user), "
            "count(DISTINCT e.reporter), group_concat(DISTINCT e.statistic), "
            "min(e.time), max(e.time), "
            "(SELECT l.reason FROM evidence l WHERE l.accused = e.accused "
            " ORDER BY l.time DESC LIMIT 1) "
            "FROM evidence e "
            "LEFT JOIN peer_keys k ON k.peer = e.accused "
            "LEFT JOIN users u ON u.key = k.user_key "
            "GROUP BY e.accused "
            "ORDER BY count(DISTINCT e.reporter_user) DESC, count(*) DESC, e.accused "
            "LIMIT ?",
            (limit,),
        ).fetchall()
        return [
            Accused(
                peer=str(peer),
                username=None if name is None else str(name),
                banned=bool(banned),
                findings=int(findings),
                reporters=int(reporters),
                reporter_peers=int(reporter_peers),
                statistics=sorted(str(statistics).split(",")),
                first_seen=float(first),
                last_seen=float(last),
                latest_reason=str(reason),
            )
            for (peer, name, banned, findings, reporters, reporter_peers, statistics, first,
                 last, reason) in rows
        ]  # fmt: skip
