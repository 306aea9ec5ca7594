"""ContributionReporter against a fake coordinator session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from core.account.reporter import REJECTIONS_KEPT, ContributionReporter
from core.account.session import AccountSession


class RejectingSession:
    """A coordinator that counts one contribution of each report and rejects another."""

    async def report_contributions(self, report: Mapping[str, Any]) -> dict[str, Any]:
        rejected = [{"peer": f"peer-{report['epoch']}", "reason": "no account"}]
        return {"accepted": 1, "rejected": rejected}


async def test_only_the_latest_rejections_are_kept() -> None:
    """An auxiliary peer reports every epoch for weeks: rejections must not pile up in memory."""
    reporter = ContributionReporter(cast(AccountSession, RejectingSession()))
    for epoch in range(2_000):
        reporter.submit({"epoch": epoch, "contributions": []})
    await reporter.close()
    assert (reporter.sent, reporter.accepted) == (2_000, 2_000)
    assert len(reporter.rejected) == REJECTIONS_KEPT
    assert reporter.rejected[-1]["peer"] == "peer-1999"
