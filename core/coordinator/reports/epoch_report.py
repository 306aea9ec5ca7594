"""Reading the auxiliary peer's epoch report and deciding which contributions count.

Each contribution names a peer and carries that peer's access pass. It counts only if the pass is
signed by the project key for this project, is bound to that very peer, was valid when the epoch
ended (a pass that expired is forgiven for ``pass_lifetime`` seconds, the time a peer may have
worked under it), and names a user who exists, is not banned, and proved that they hold the peer's
key (``peer_keys``). The user is the pass's, never the reporter's word: nobody can credit samples
to someone else, nor, with a pass from before proofs of possession, to themselves for another's
key. A malformed entry is rejected with its reason and does not spoil the rest of the report; a
malformed report as a whole is a 400.

A report may also carry the epoch's figures (loss, speed, live peers) for the project page; they
are read by ``figures.parse_figures`` and are optional, so older auxiliary peers are still heard.
A *late* report adds contributions the auxiliary peer found after it reported the epoch; it carries
no figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from core.coordinator.errors import BadRequest
from core.coordinator.people.accounts import User
from core.coordinator.people.names import Username
from core.coordinator.reports.figures import EpochFigures, parse_figures
from core.coordinator.reports.records import Counted
from core.trust.errors import PeerIdError
from core.trust.passes import AccessDenied, pass_from_text
from core.trust.peer_id import PeerID
from core.util.errors import BarnraiseError, WireFormatError

MAX_CONTRIBUTIONS = 10_000
MAX_COUNT = 2**53
"""Sample counts above this are not believable (and would lose precision in JSON)."""
FUTURE_SLACK = 3600.0


@dataclass(frozen=True, slots=True)
class EpochReport:
    epoch: int
    time: float
    samples: int
    contributions: list[Any]
    figures: EpochFigures | None = None
    """None from an auxiliary peer that sends no figures (an older version's), or in a late one."""
    late: bool = False
    """More contributions to an epoch reported before (records read late, a gone peer's share
    of a round): they add to it, and the report carries no figures."""


@dataclass(frozen=True, slots=True)
class Verdicts:
    counted: list[Counted]
    rejected: list[dict[str, str]]


def parse_report(body: Mapping[str, Any], now: float) -> EpochReport:
    epoch = _count(body.get("epoch"), "epoch")
    samples = _count(body.get("samples"), "samples")
    when = _number(body.get("time"))
    if when is None or when <= 0:
        raise BadRequest("time must be the Unix time the epoch ended")
    if when > now + FUTURE_SLACK:
        raise BadRequest("the epoch's time is in the future; check the reporting peer's clock")
    contributions = body.get("contributions")
    if not isinstance(contributions, list):
        raise BadRequest("contributions must be a list")
    if len(contributions) > MAX_CONTRIBUTIONS:
        raise BadRequest(f"at most {MAX_CONTRIBUTIONS} contributions per report")
    late = body.get("late", False)
    if not isinstance(late, bool):
        raise BadRequest("late must be true or false")
    if late:
        return EpochReport(epoch, when, samples, contributions, None, late=True)
    return EpochReport(epoch, when, samples, contributions, parse_figures(body, epoch, when))


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
            shown = entry.get("peer") if isinstance(entry, dict) else None
            shown = shown[:100] if isinstance(shown, str) else ""
            try:
                item = self._one(entry, report.time)
                if item.peer in seen:
                    raise BadRequest("the peer appears twice in this report")
            except BarnraiseError as exc:
                rejected.append({"peer": shown, "reason": str(exc)})
                continue
            seen.add(item.peer)
            counted.append(item)
        return Verdicts(counted, rejected)

    def _one(self, entry: object, epoch_time: float) -> Counted:
        if not isinstance(entry, dict):
            raise BadRequest("a contribution must be an object")
        raw_peer = entry.get("peer")
        if not isinstance(raw_peer, str) or len(raw_peer) > 200:
            raise BadRequest("peer must be a PeerID string")
        try:
            peer = PeerID.from_string(raw_peer)
        except PeerIdError as exc:
            raise BadRequest(f"not a PeerID: {exc}") from None
        samples = _count(entry.get("samples"), "samples")
        compute = _number(entry.get("compute_seconds"))
        if compute is None or compute < 0:
            raise BadRequest("compute_seconds must be a number of seconds, 0 or more")
        text = entry.get("pass")
        if not isinstance(text, str):
            raise BadRequest("the contribution carries no access pass")
        try:
            access = pass_from_text(text)
        except WireFormatError as exc:
            raise BadRequest(f"a malformed access pass ({exc})") from None
        if access.peer != peer:
            raise AccessDenied(f"the pass of {access.username!r} belongs to another peer key")
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
        if self.key_owner(str(peer)) != owner.key:
            raise AccessDenied(f"the account {owner.name!r} never proved it holds this peer's key")
        return Counted(str(peer), owner.key, samples, compute)


def _count(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < MAX_COUNT:
        raise BadRequest(f"{name} must be a whole number, 0 or more")
    return value


def _number(value: object) -> float | None:
    """``value`` as a float if it is a finite JSON number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)  # an int of hundreds of digits is too large for a float
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
