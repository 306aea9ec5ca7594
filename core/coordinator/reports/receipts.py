"""Receipts for expert work: which of an expert server's receipts count, the credit, and the rows.

A trainer signs receipts for the samples a server's experts computed for it (``core.trust.receipts``:
running totals per server, trainer and session); the server checks them against what it served
and its owner posts them (``POST /receipts``). Here each receipt counts only if:

- its trainer signed it, for this project (the server's own key cannot sign for a trainer, and
  the record refuses a trainer that names itself as the server);
- the poster is the account that proved it holds the **server's** key (``peer_keys``): only a
  server's owner collects its credit, so receipts cannot be redirected to anyone else;
- the **trainer's** key was proved by an account that is not banned and is **not the poster**.
  A receipt is one account's word about another's work; a volunteer's own trainer vouching for
  their own server would be their word about themselves, which the server's count already is;
- the poster has not opened more than ``MAX_NEW_PER_HOUR`` new (server, trainer, session) rows in
  the last hour, so a pair of accounts cannot fill the table.

The credit is the receipt's total (forward plus backward samples) less what its (server, trainer,
session) row credited before, never negative, so a receipt posted twice, or an older one after a
newer, adds nothing; the row keeps the newest receipt that backs its whole credit. The credit goes
to the server owner's ``totals`` and ``days`` in the same transaction as the row, both as samples
(they rank with the samples of collaborative training: a sample served through an expert is work
done for the project like a sample trained) and as ``expert_samples``, which the leaderboard
shows apart. The reported epochs (``epochs``) are left as they are.

What no check here can tell is whether two accounts that trust each other invented the work
together; each row names both accounts and keeps the signed receipt, and ``credited_by_user``
shows who was credited through how many other accounts, for the moderators' audit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from core.coordinator.errors import BadRequest, Forbidden
from core.coordinator.people.accounts import User
from core.coordinator.reports.records import utc_day
from core.coordinator.schema import transaction
from core.trust.receipts import InvalidReceipt, Receipt
from core.util.errors import BarnraiseError

MAX_NEW_PER_HOUR = 1000
"""New (server, trainer, session) rows one account may open an hour: a server meets a few
trainers, and each trainer process is one session."""
HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Vouched:
    """A receipt that counts, with the account that proved its trainer's key."""

    receipt: Receipt
    trainer_user: str


@dataclass(frozen=True, slots=True)
class ReceiptVerdicts:
    accepted: list[Vouched]
    rejected: list[dict[str, str]]


@dataclass(frozen=True, slots=True)
class Credit:
    samples: int
    """Expert samples newly credited."""
    raised: int
    """Receipts that raised their row's credit (new, or newer with a larger total)."""


@dataclass(frozen=True, slots=True)
class ReceiptJudge:
    """What a receipt is checked against."""

    project: str
    poster: User
    """The logged-in account posting the receipts."""
    now: float
    user: Callable[[str], User | None]
    """Looks a user up by key."""
    key_owner: Callable[[str], str | None]
    """The key of the account that proved it holds a peer key, if any did."""
    known: Callable[[Receipt], bool]
    """Whether the receipt's (server, trainer, session) already has a row."""
    new_since: Callable[[str, float], int]
    """Rows an account opened since a time."""

    def __call__(self, items: list[Any]) -> ReceiptVerdicts:
        """Split the receipts into those that count and those refused (with reasons)."""
        accepted: list[Vouched] = []
        rejected: list[dict[str, str]] = []
        opened: set[tuple[object, ...]] = set()
        budget = MAX_NEW_PER_HOUR - self.new_since(self.poster.key, self.now - HOUR)
        for raw in items:
            try:
                item = self._one(raw)
                key = item.receipt.key
                if key not in opened and not self.known(item.receipt):
                    if budget <= 0:
                        raise Forbidden(
                            f"this account opened more than {MAX_NEW_PER_HOUR} sessions' "
                            "receipts in an hour"
                        )
                    budget -= 1
                    opened.add(key)
            except BarnraiseError as exc:
                rejected.append({**_shown(raw), "reason": str(exc)})
                continue
            accepted.append(item)
        return ReceiptVerdicts(accepted, rejected)

    def _one(self, raw: object) -> Vouched:
        receipt = Receipt.from_json(raw)
        receipt.verify()
        if receipt.project != self.project:
            raise BadRequest(f"the receipt is for project {receipt.project!r}, not this one")
        if self.key_owner(str(receipt.server)) != self.poster.key:
            raise Forbidden(
                "only the account that proved it holds the server's key may post its receipts"
            )
        trainer_key = self.key_owner(str(receipt.trainer))
        trainer = None if trainer_key is None else self.user(trainer_key)
        if trainer is None:
            raise Forbidden("no account here proved it holds the trainer's key")
        if trainer.key == self.poster.key:
            raise Forbidden(
                "the trainer's key is the poster's own account's: receipts count between "
                "accounts only"
            )
        if trainer.banned:
            raise Forbidden("the trainer's account is banned")
        return Vouched(receipt, trainer.key)


class Receipts:
    """The ``receipts`` rows, the credit they add to the leaderboard, and the audit's queries."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def known(self, receipt: Receipt) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM receipts WHERE server = ? AND trainer = ? AND session = ?",
            (str(receipt.server), str(receipt.trainer), receipt.session),
        ).fetchone()
        return row is not None

    def new_since(self, user_key: str, since: float) -> int:
        """Rows crediting ``user_key`` opened at or after ``since``."""
        row = self._conn.execute(
            "SELECT count(*) FROM receipts WHERE user_key = ? AND first_received >= ?",
            (user_key, since),
        ).fetchone()
        return int(row[0])

    def record(self, user_key: str, accepted: Iterable[Vouched], now: float) -> Credit:
        """Keep each receipt as its row's newest and credit ``user_key`` (the server's owner) with
        what its total adds; the rows, the totals and the day in one transaction."""
        credited = raised = 0
        with transaction(self._conn):
            for item in accepted:
                credit = self._keep(user_key, item, now)
                if credit is not None:
                    credited += credit
                    raised += 1
            if credited:
                self._credit(user_key, credited, now)
        return Credit(credited, raised)

    def _keep(self, user_key: str, item: Vouched, now: float) -> int | None:
        """The samples this receipt adds; None if its row holds it or a newer one already."""
        r = item.receipt
        where = (str(r.server), str(r.trainer), r.session)
        row = self._conn.execute(
            "SELECT sequence, credited FROM receipts "
            "WHERE server = ? AND trainer = ? AND session = ?",
            where,
        ).fetchone()
        if row is None:
            self._conn.execute(
                "INSERT INTO receipts (server, trainer, session, sequence, forward_samples, "
                "backward_samples, credited, receipts, user_key, trainer_user, first_received, "
                "received, signed) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?)",
                (
                    *where,
                    r.sequence,
                    r.forward_samples,
                    r.backward_samples,
                    r.samples,
                    user_key,
                    item.trainer_user,
                    now,
                    now,
                    r.to_bytes(),
                ),
            )
            return r.samples
        sequence, before = int(row[0]), int(row[1])
        if r.sequence <= sequence or r.samples < before:
            # posted twice, an older one after a newer, or one vouching for less than was
            # credited: the row keeps the receipt that backs its credit, and nothing is added
            return None
        credit = r.samples - before
        self._conn.execute(
            "UPDATE receipts SET sequence = ?, forward_samples = ?, backward_samples = ?, "
            "credited = ?, receipts = receipts + ?, received = ?, signed = ? "
            "WHERE server = ? AND trainer = ? AND session = ?",
            (
                r.sequence,
                r.forward_samples,
                r.backward_samples,
                r.samples,
                1 if credit else 0,
                now,
                r.to_bytes(),
                *where,
            ),
        )
        return credit or None

    def _credit(self, user_key: str, samples: int, now: float) -> None:
        self._conn.execute(
            "INSERT INTO totals (user_key, samples, compute_seconds, last_seen, expert_samples) "
            "VALUES (?, ?, 0.0, ?, ?) ON CONFLICT (user_key) DO UPDATE SET "
            "samples = samples + excluded.samples, "
            "expert_samples = expert_samples + excluded.expert_samples, "
            "last_seen = max(last_seen, excluded.last_seen)",
            (user_key, samples, now, samples),
        )
        self._conn.execute(
            "INSERT INTO days (user_key, day, samples, compute_seconds, expert_samples) "
            "VALUES (?, ?, ?, 0.0, ?) ON CONFLICT (user_key, day) DO UPDATE SET "
            "samples = samples + excluded.samples, "
            "expert_samples = expert_samples + excluded.expert_samples",
            (user_key, utc_day(now), samples, samples),
        )

    # ---- the audit -------------------------------------------------------------------------------

    def credited_by_user(self) -> list[dict[str, Any]]:
        """Per credited account, most first: the expert samples receipts credited it, the receipts
        that raised the credit, the sessions (rows), and how many distinct accounts vouched."""
        rows = self._conn.execute(
            "SELECT users.name, sum(receipts.credited), sum(receipts.receipts), count(*), "
            "count(DISTINCT receipts.trainer_user) FROM receipts "
            "JOIN users ON users.key = receipts.user_key GROUP BY receipts.user_key "
            "ORDER BY sum(receipts.credited) DESC, receipts.user_key"
        ).fetchall()
        return [
            {
                "username": str(name),
                "expert_samples": int(samples),
                "receipts": int(receipts),
                "sessions": int(sessions),
                "vouching_accounts": int(vouching),
            }
            for name, samples, receipts, sessions, vouching in rows
        ]

    def credited_by_key(self) -> dict[str, int]:
        """Expert samples the rows credited, per user key (what ``totals.expert_samples`` holds)."""
        rows = self._conn.execute(
            "SELECT user_key, sum(credited) FROM receipts GROUP BY user_key"
        ).fetchall()
        return {str(key): int(samples) for key, samples in rows}

    def failing(self, project: str | None) -> list[dict[str, str]]:
        """Every stored receipt checked again (its signature, its project unless ``project`` is
        None, that it is the receipt its row describes, and that it vouches for what the row
        credited); those that fail, with the reason."""
        failed = []
        for row in self._conn.execute(
            "SELECT receipts.server, receipts.trainer, receipts.session, receipts.sequence, "
            "receipts.forward_samples, receipts.backward_samples, receipts.credited, "
            "receipts.signed, users.name "
            "FROM receipts JOIN users ON users.key = receipts.user_key "
            "ORDER BY receipts.user_key, receipts.first_received"
        ):
            server, trainer, session, sequence, forward, backward, credited, signed, name = row
            shown = {
                "username": str(name),
                "server": str(server),
                "trainer": str(trainer),
                "session": bytes(session).hex(),
            }
            try:
                receipt = Receipt.from_bytes(bytes(signed))
                receipt.verify()
                described = (str(server), str(trainer), bytes(session), sequence, forward, backward)
                kept = (
                    str(receipt.server),
                    str(receipt.trainer),
                    receipt.session,
                    receipt.sequence,
                    receipt.forward_samples,
                    receipt.backward_samples,
                )
                if kept != described:
                    raise InvalidReceipt("the signed receipt is not the one its row describes")
                if project is not None and receipt.project != project:
                    raise InvalidReceipt(f"the receipt is for project {receipt.project!r}")
                if credited != receipt.samples:
                    raise InvalidReceipt(
                        f"the row credited {credited} samples, its receipt vouches for "
                        f"{receipt.samples}"
                    )
            except InvalidReceipt as exc:
                failed.append({**shown, "reason": str(exc)})
        return failed


def _shown(raw: object) -> dict[str, str]:
    """The peers a refused receipt names, shortened, so that the poster can find it."""
    shown = {}
    for name in ("server", "trainer"):
        value = raw.get(name) if isinstance(raw, dict) else None
        shown[name] = value[:100] if isinstance(value, str) else ""
    return shown
