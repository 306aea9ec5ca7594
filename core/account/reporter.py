"""CoordinatorReporter: a backbone's reports to the coordinator — completed epochs, the
held-out evaluations of its replica, and the evidence members signed against each other — and an
expert server's: the receipts trainers signed for its work.

Reports go out one at a time, in order, from one background task; a coordinator that is down is
retried with a growing pause (the coordinator counts each (epoch, peer) and each accusation once,
and keeps one evaluation per epoch, so a retried report is harmless). At shutdown the reporter gets
a few seconds to send what is queued, so the last epochs of a run still reach the leaderboard.
Evidence and receipts go in reports as long as the coordinator takes (``core.trust.reports``); a
receipt posted twice is credited once (it carries running totals). Why the coordinator refuses
receipts is logged once per cause: a server reports every half minute for weeks, and one refused
cause would otherwise fill its log.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.account.errors import AccessRefused, AccountError, CoordinatorUnavailable
from core.account.session import AccountSession
from core.trust.evidence import Evidence
from core.trust.receipts import Receipt
from core.trust.reports import EVIDENCE, RECEIPTS
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

RETRIES = 5
REJECTIONS_KEPT = 100
"""The latest rejections, for diagnostics: a backbone reports an epoch every few minutes for
weeks, and a peer without an account is rejected in every one."""
CAUSES_KEPT = 100
"""Causes of refused receipts already logged: at most this many are remembered."""


@dataclass(frozen=True)
class _Report:
    kind: str
    """``contributions``, ``evaluation``, ``evidence`` or ``receipts``: the endpoint, and the words
    of the log."""
    body: Mapping[str, Any]

    @property
    def what(self) -> str:
        if self.kind == "evidence":
            return f"{len(self.body.get(EVIDENCE.field, []))} accusation(s)"
        if self.kind == "receipts":
            return f"{len(self.body.get(RECEIPTS.field, []))} receipt(s)"
        if self.kind == "evaluation":
            return f"held-out evaluation of epoch {self.body.get('epoch')}"
        if self.body.get("withdrawn"):
            return f"credit withdrawn from epoch {self.body.get('epoch')}"
        late = " (late)" if self.body.get("late") else ""
        return f"contributions of epoch {self.body.get('epoch')}{late}"


class CoordinatorReporter:
    def __init__(self, session: AccountSession, *, first_retry: float = 1.0) -> None:
        self.session = session
        self.first_retry = first_retry
        self.sent = 0
        self.accepted = 0
        self.rejected: deque[dict[str, Any]] = deque(maxlen=REJECTIONS_KEPT)
        self.evidence_sent = 0
        """Accusations the coordinator accepted (each counted once, however often it was sent)."""
        self.evaluations_sent = 0
        """Held-out evaluations the coordinator took."""
        self.receipts_accepted = 0
        """Receipts the coordinator accepted (a resent one among them, crediting nothing new)."""
        self.expert_samples_credited = 0
        """Expert samples the coordinator credited for those receipts."""
        self._causes: set[str] = set()
        self.failed = 0
        """Reports given up on (the coordinator stayed down, or refused the reporter)."""
        self._queue: asyncio.Queue[_Report] = asyncio.Queue()
        self._tasks = BackgroundTasks("contribution-reporter")
        self._worker: asyncio.Task[None] | None = None

    def submit(self, report: Mapping[str, Any]) -> None:
        """Queue one epoch's report (the ``/contributions`` body); returns at once."""
        self._put(_Report("contributions", report))

    def submit_evaluation(self, report: Mapping[str, Any]) -> None:
        """Queue one held-out evaluation (the ``/evaluations`` body); returns at once."""
        self._put(_Report("evaluation", report))

    def submit_evidence(self, evidence: Sequence[Evidence]) -> None:
        """Queue accusations for ``/evidence`` (split into reports the coordinator takes)."""
        for body in EVIDENCE.reports(evidence):
            self._put(_Report("evidence", body))

    def submit_receipts(self, receipts: Sequence[Receipt]) -> None:
        """Queue trainers' receipts for ``/receipts`` (split into reports the coordinator takes)."""
        for body in RECEIPTS.reports(receipts):
            self._put(_Report("receipts", body))

    def _put(self, report: _Report) -> None:
        if self._worker is None:
            self._worker = self._tasks.spawn("send", self._send_all())
        self._queue.put_nowait(report)

    async def close(self, timeout: float = 10.0) -> None:
        """Send what is queued (for at most ``timeout`` seconds), then stop."""
        if self._worker is not None:
            try:
                async with asyncio.timeout(timeout):
                    await self._queue.join()
            except TimeoutError:
                log.warning(
                    "%d report(s) not sent: the coordinator did not answer in time",
                    self._queue.qsize(),
                )
        await self._tasks.close()

    async def _send_all(self) -> None:
        while True:
            report = await self._queue.get()
            try:
                await self._send(report)
            finally:
                self._queue.task_done()

    async def _send(self, report: _Report) -> None:
        pause = self.first_retry
        for attempt in range(RETRIES):
            try:
                answer = await self._post(report)
            except CoordinatorUnavailable as exc:
                if attempt == RETRIES - 1:
                    break
                log.info("%s: %s; retrying", report.what, exc)
                await asyncio.sleep(pause)
                pause *= 2
                continue
            except AccessRefused as exc:
                if self._first(report, f"refused: {exc}"):
                    log.error("the coordinator refuses our %s reports: %s", report.kind, exc)
                break
            except AccountError as exc:
                log.warning("%s not reported: %s", report.what, exc)
                break
            self.sent += 1
            self._count(report, answer)
            for rejected in answer.get("rejected", []):
                self.rejected.append(rejected)
                reason = rejected.get("reason") if isinstance(rejected, dict) else None
                if self._first(report, f"rejected: {reason}"):
                    log.warning("the coordinator rejected one of the %s: %s", report.what, rejected)
            return
        self.failed += 1

    async def _post(self, report: _Report) -> dict[str, Any]:
        session = self.session
        if report.kind == "evidence":
            return await session.report_evidence(report.body)
        if report.kind == "receipts":
            return await session.report_receipts(report.body)
        if report.kind == "evaluation":
            return await session.report_evaluation(report.body)
        return await session.report_contributions(report.body)

    def _count(self, report: _Report, answer: Mapping[str, Any]) -> None:
        if report.kind == "evidence":
            self.evidence_sent += int(answer.get("accepted", 0))
        elif report.kind == "receipts":
            self.receipts_accepted += int(answer.get("accepted", 0))
            self.expert_samples_credited += int(answer.get("credited", 0))
        elif report.kind == "evaluation":
            self.evaluations_sent += 1
        else:
            self.accepted += int(answer.get("accepted", 0))

    def _first(self, report: _Report, cause: str) -> bool:
        """Whether to log ``cause``: always, except for receipts, whose causes are logged once."""
        if report.kind != "receipts":
            return True
        if cause in self._causes or len(self._causes) >= CAUSES_KEPT:
            return False
        self._causes.add(cause)
        return True
