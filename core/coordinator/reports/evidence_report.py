"""Reading the backbone's evidence report and deciding which accusations to keep.

Each accusation is a signed ``Evidence`` record (``core.trust.evidence``). It is kept only if its
reporter signed it, for this project, within ``MAX_AGE`` seconds (and not in the future), and if
the reporter's key was proved by an account (``peer_keys``) that exists and is not banned: an
accusation is worth the standing of the account that makes it, and a freshly generated key with no
account counts for nothing. Each reporting account may add ``MAX_PER_HOUR`` rows an hour, so a
malicious member cannot fill the table; how many one report may hold is said with its body
(``core.trust.reports.EVIDENCE``).

Nothing here proves the accused guilty: the reporter says what it measured on data only it
received. Moderators see how many distinct accounts accused a peer (``evidence_records``) and
decide. A malformed entry is rejected with its reason and does not spoil the rest of the report; a
malformed report as a whole is a 400.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.coordinator.errors import BadRequest, Forbidden
from core.coordinator.people.accounts import User
from core.coordinator.reports.evidence_records import Accepted
from core.trust.evidence import Evidence
from core.trust.reports import FUTURE_SLACK
from core.util.errors import BarnraiseError

MAX_PER_HOUR = 1000
"""Rows one reporting account may add in an hour (an honest reducer finds a few per epoch)."""
MAX_AGE = 2 * 86400.0
"""Older accusations are stale: the round is long gone, and the model with it."""
HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class EvidenceVerdicts:
    accepted: list[Accepted]
    rejected: list[dict[str, str]]


@dataclass(frozen=True, slots=True)
class EvidenceJudge:
    """What an accusation is checked against."""

    project: str
    now: float
    user: Callable[[str], User | None]
    """Looks a user up by key."""
    key_owner: Callable[[str], str | None]
    """The key of the account that proved it holds a peer key, if any did."""
    received_since: Callable[[str, float], int]
    """Rows already stored for a reporting account since a time."""

    def __call__(self, items: list[Any]) -> EvidenceVerdicts:
        """Split the accusations into those kept and those refused (with reasons)."""
        accepted: list[Accepted] = []
        rejected: list[dict[str, str]] = []
        seen: set[tuple[object, ...]] = set()
        budget: dict[str, int] = {}
        for raw in items:
            try:
                item = self._one(raw)
                if item.evidence.identity in seen:
                    raise BadRequest("the accusation appears twice in this report")
                self._spend(budget, item.reporter_user)
            except BarnraiseError as exc:
                rejected.append({**_shown(raw), "reason": str(exc)})
                continue
            seen.add(item.evidence.identity)
            accepted.append(item)
        return EvidenceVerdicts(accepted, rejected)

    def _one(self, raw: object) -> Accepted:
        evidence = Evidence.from_json(raw)
        evidence.verify()
        if evidence.project != self.project:
            raise BadRequest(f"the accusation is for project {evidence.project!r}")
        if evidence.time > self.now + FUTURE_SLACK:
            raise BadRequest("the accusation is signed in the future; check the reporter's clock")
        if evidence.time < self.now - MAX_AGE:
            raise BadRequest(f"the accusation is older than {MAX_AGE / 3600:.0f} hours")
        owner_key = self.key_owner(str(evidence.reporter))
        owner = None if owner_key is None else self.user(owner_key)
        if owner is None:
            raise Forbidden("no account here proved it holds the reporter's key")
        if owner.banned:
            raise Forbidden(f"the reporter's account {owner.name!r} is banned")
        return Accepted(evidence, owner.key)

    def _spend(self, budget: dict[str, int], reporter_user: str) -> None:
        if reporter_user not in budget:
            budget[reporter_user] = MAX_PER_HOUR - self.received_since(
                reporter_user, self.now - HOUR
            )
        if budget[reporter_user] <= 0:
            raise Forbidden(f"the reporter's account sent more than {MAX_PER_HOUR} in an hour")
        budget[reporter_user] -= 1


def _shown(raw: object) -> dict[str, str]:
    """The peers a refused entry names, shortened, so that the reporter can find it."""
    shown = {}
    for name in ("reporter", "accused"):
        value = raw.get(name) if isinstance(raw, dict) else None
        shown[name] = value[:100] if isinstance(value, str) else ""
    return shown
