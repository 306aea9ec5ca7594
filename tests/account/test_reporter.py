"""CoordinatorReporter against a fake coordinator session, and its held-out evaluations against
a real coordinator."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

from core.account import CoordinatorClient
from core.account.reporter import REJECTIONS_KEPT, CoordinatorReporter
from core.account.session import AccountSession
from core.trust.reports import evaluation_report
from core.worker.events import PeerEvaluation
from tests.account.coordinator import PASSWORD, Coordinator


class RejectingSession:
    """A coordinator that counts one contribution of each report and rejects another."""

    async def report_contributions(self, report: Mapping[str, Any]) -> dict[str, Any]:
        rejected = [{"peer": f"peer-{report['epoch']}", "reason": "no account"}]
        return {"accepted": 1, "rejected": rejected}


async def test_only_the_latest_rejections_are_kept() -> None:
    """A backbone reports every epoch for weeks: rejections must not pile up in memory."""
    reporter = CoordinatorReporter(cast(AccountSession, RejectingSession()))
    for epoch in range(2_000):
        reporter.submit({"epoch": epoch, "contributions": []})
    await reporter.close()
    assert (reporter.sent, reporter.accepted) == (2_000, 2_000)
    assert len(reporter.rejected) == REJECTIONS_KEPT
    assert reporter.rejected[-1]["peer"] == "peer-1999"


async def test_held_out_evaluations_reach_the_coordinator(
    coordinator: Coordinator, client: CoordinatorClient
) -> None:
    session = AccountSession(client, await client.login("mod", PASSWORD))
    reporter = CoordinatorReporter(session, first_retry=0.01)
    now = time.time()
    for epoch, loss in ((2, 4.5), (4, 4.0), (4, 4.0)):  # the last sent twice, as a retry would
        report = evaluation_report(PeerEvaluation(epoch, loss, 0.375, 64, 2048, 1.5, now))
        assert report is not None
        reporter.submit_evaluation(report)
    # one the coordinator refuses is logged and given up on, not retried
    reporter.submit_evaluation({"epoch": 5, "loss": -1.0})
    await reporter.close()
    assert (reporter.evaluations_sent, reporter.failed) == (3, 1)
    store = coordinator.service.store
    latest = store.evaluations.latest()
    assert latest is not None
    assert (latest.epoch, latest.loss, latest.accuracy, latest.samples) == (4, 4.0, 0.375, 64)
    assert store.evaluations.losses(10) == [(2.0, 4.5), (4.0, 4.0)]


async def test_a_volunteers_account_cannot_report_evaluations(
    coordinator: Coordinator, client: CoordinatorClient
) -> None:
    session = AccountSession(client, await client.login("alice", PASSWORD))
    reporter = CoordinatorReporter(session, first_retry=0.01)
    report = evaluation_report(PeerEvaluation(1, 3.0, 0.5, 8, 80, 0.5, time.time()))
    assert report is not None
    reporter.submit_evaluation(report)
    await reporter.close()
    assert (reporter.evaluations_sent, reporter.failed) == (0, 1)
    assert coordinator.service.store.evaluations.latest() is None
