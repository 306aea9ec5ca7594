"""Deciding which contributions of the backbone's epoch report count.

The report's body, its bounds and the reading of each entry are ``core.trust.reports``'s; an entry
that does not read (malformed, or its pass bound to another peer's key) is refused with its reason
and does not spoil the rest of the report, and a report wrong as a whole is a 400.

Each contribution counts only if its pass is signed by the project key for this project, was valid
when the epoch ended (a pass that expired is forgiven for ``pass_lifetime`` seconds, the time a peer
may have worked under it), and names a user who exists, is not banned, and proved that they hold
the peer's key (``peer_keys``). The user is the pass's, never the reporter's word: nobody can credit
samples to someone else, nor, with a pass from before proofs of possession, to themselves for
another's key. A report's figures (``figures``) are optional, so older backbones are still
heard; a *late* report adds contributions to an epoch reported before, and carries no figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.coordinator.errors import BadRequest
from core.coordinator.people.accounts import User
from core.coordinator.people.names import Username
from core.coordinator.reports.records import Counted
from core.trust.passes import AccessDenied
from core.trust.peer_id import PeerID
from core.trust.reports import SHOWN_CHARS, Contribution, EpochReport, Refused
from core.util.errors import BarnraiseError


@dataclass(frozen=True, slots=True)
class Verdicts:
    counted: list[Counted]
    rejected: list[dict[str, str]]


@dataclass(frozen=True, slots=True)
class Judge:
    """What a contribution is checked against."""

    project: str
    project_key: PeerID
    pass_lifetime: float
    user: Callable[[Username], User | None]
    """Looks a user up by name."""
    key_owner: Callable[[str], str | None]
    """The key of the account that proved it holds a peer key, if any did."""

    def __call__(self, report: EpochReport) -> Verdicts:
        """Split the report's contributions into those that count and those refused (with
        reasons)."""
        counted: list[Counted] = []
        rejected: list[dict[str, str]] = []
        seen: set[str] = set()
        for entry in report.contributions:
            if isinstance(entry, Refused):
                rejected.append({"peer": entry.peer, "reason": entry.reason})
                continue
            try:
                item = self._one(entry, report.time)
                if item.peer in seen:
                    raise BadRequest("the peer appears twice in this report")
            except BarnraiseError as exc:
                rejected.append({"peer": entry.peer[:SHOWN_CHARS], "reason": str(exc)})
                continue
            seen.add(item.peer)
            counted.append(item)
        return Verdicts(counted, rejected)

    def _one(self, entry: Contribution, epoch_time: float) -> Counted:
        access = entry.access
        # A peer may have worked under a pass that expired just before the epoch ended.
        access.check(self.project, self.project_key, epoch_time, grace=self.pass_lifetime)
        try:
            owner = self.user(Username.parse(access.username))
        except BadRequest:
            owner = None
        if owner is None:
            raise AccessDenied(f"the pass names {access.username!r}, who has no account here")
        if owner.banned:
            raise AccessDenied(f"the account {owner.name!r} is banned")
        peer = str(access.peer)  # the reader checked it is the entry's peer
        if self.key_owner(peer) != owner.key:
            raise AccessDenied(f"the account {owner.name!r} never proved it holds this peer's key")
        return Counted(
            peer, owner.key, entry.samples, entry.compute_seconds, entry.claimed, entry.note
        )
