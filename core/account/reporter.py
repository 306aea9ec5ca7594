"""ContributionReporter: an auxiliary peer's reports of completed epochs to the coordinator.

Reports go out one at a time, in order, from one background task; a coordinator that is down is
retried with a growing pause (the coordinator counts each (epoch, peer) once, so a retried report is
harmless). At shutdown the reporter gets a few seconds to send what is queued, so the last epochs of
a run still reach the leaderboard.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping
from typing import Any

from core.account.errors import AccessRefused, AccountError, CoordinatorUnavailable
from core.account.session import AccountSession
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

RETRIES = 5
REJECTIONS_KEPT = 100
"""The latest rejections, for diagnostics: an auxiliary peer reports an epoch every few minutes for
weeks, and a peer without an account is rejected in every one."""


class ContributionReporter:
    def __init__(self, session: AccountSession, *, first_retry: float = 1.0) -> None:
        self.session = session
        self.first_retry = first_retry
        self.sent = 0
        self.accepted = 0
        self.rejected: deque[dict[str, Any]] = deque(maxlen=REJECTIONS_KEPT)
        self.failed = 0
        """Reports given up on (the coordinator stayed down, or refused the reporter)."""
        self._queue: asyncio.Queue[Mapping[str, Any]] = asyncio.Queue()
        self._tasks = BackgroundTasks("contribution-reporter")
        self._worker: asyncio.Task[None] | None = None

    def submit(self, report: Mapping[str, Any]) -> None:
        """Queue one epoch's report (the ``/contributions`` body); returns at once."""
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
                    "%d contribution report(s) not sent: the coordinator did not answer in time",
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

    async def _send(self, report: Mapping[str, Any]) -> None:
        pause = self.first_retry
        for attempt in range(RETRIES):
            try:
                answer = await self.session.report_contributions(report)
            except CoordinatorUnavailable as exc:
                if attempt == RETRIES - 1:
                    break
                log.info("contributions of epoch %s: %s; retrying", report.get("epoch"), exc)
                await asyncio.sleep(pause)
                pause *= 2
                continue
            except AccessRefused as exc:
                log.error("the coordinator refuses our contribution reports: %s", exc)
                break
            except AccountError as exc:
                log.warning("contributions of epoch %s not reported: %s", report.get("epoch"), exc)
                break
            self.sent += 1
            self.accepted += int(answer.get("accepted", 0))
            for rejected in answer.get("rejected", []):
                log.warning("the coordinator rejected a contribution: %s", rejected)
                self.rejected.append(rejected)
            return
        self.failed += 1
