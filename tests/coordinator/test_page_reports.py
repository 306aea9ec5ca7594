"""The figures of the backbone's epoch reports: hostile values are refused whole, old reports
are still heard, an open project's coordinator takes a moderator's reports, and the peer side only
sends values the coordinator takes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from core.coordinator import CoordinatorStore
from core.coordinator.errors import StoreError
from core.coordinator.page.curve import MOST_POINTS
from core.coordinator.schema import _MIGRATIONS, APPLICATION_ID, SCHEMA_VERSION
from core.net import Identity
from core.training.credit.metrics import EpochMetrics
from core.trust.reports import MAX_LOSS, MAX_PEERS, EpochFigures
from core.util.files.sqlite_file import SqliteFile
from tests.coordinator.conftest import PASSWORD
from tests.coordinator.page_support import AUX, running_page

GOOD = '"loss": 2.5, "samples_per_second": 10.0, "alive_peers": 2'


def report_text(figures: str, epoch: int = 1) -> str:
    return (
        f'{{"epoch": {epoch}, "time": 1700000000.0, "samples": 10, "contributions": [], {figures}}}'
    )


@pytest.mark.parametrize(
    ("figures", "named"),
    [
        ('"loss": NaN, "samples_per_second": 1.0, "alive_peers": 1', "loss"),
        ('"loss": Infinity, "samples_per_second": 1.0, "alive_peers": 1', "loss"),
        ('"loss": -0.5, "samples_per_second": 1.0, "alive_peers": 1', "loss"),
        ('"loss": 1e300, "samples_per_second": 1.0, "alive_peers": 1', "loss"),
        ('"loss": "2.5", "samples_per_second": 1.0, "alive_peers": 1', "loss"),
        ('"loss": true, "samples_per_second": 1.0, "alive_peers": 1', "loss"),
        ('"loss": [1.0], "samples_per_second": 1.0, "alive_peers": 1', "loss"),
        ('"loss": 1.0, "samples_per_second": -Infinity, "alive_peers": 1', "samples_per_second"),
        ('"loss": 1.0, "samples_per_second": -1, "alive_peers": 1', "samples_per_second"),
        ('"loss": 1.0, "samples_per_second": 1e12, "alive_peers": 1', "samples_per_second"),
        ('"loss": 1.0, "samples_per_second": 1.0, "alive_peers": -1', "alive_peers"),
        ('"loss": 1.0, "samples_per_second": 1.0, "alive_peers": 1.5', "alive_peers"),
        ('"loss": 1.0, "samples_per_second": 1.0, "alive_peers": true', "alive_peers"),
        ('"loss": 1.0, "samples_per_second": 1.0, "alive_peers": 10000000', "alive_peers"),
        ('"alive_peers": 1, "samples_per_second": 1.0, "loss": ' + "9" * 4000, "loss"),
        # beyond the digits Python reads as an int: not JSON it takes
        ('"alive_peers": 1, "samples_per_second": 1.0, "loss": ' + "9" * 5000, "the request"),
    ],
)
async def test_hostile_figures_are_refused_and_nothing_is_stored(
    tmp_path: Path, figures: str, named: str
) -> None:
    async with running_page(tmp_path) as page:
        reply = await page.raw_report(report_text(figures))
        assert reply.status == 400, reply
        assert reply.body["error"].startswith(named), reply.body
        assert page.service.store.figures.latest() is None
        assert page.service.store.contributions.epoch_totals() == (0, 0)
        # a good report after it is taken
        assert (await page.raw_report(report_text(GOOD))).status == 200


async def test_an_oversized_report_is_refused(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        padding = '"pad": "' + "x" * (2 * 1024 * 1024) + '", '
        reply = await page.raw_report(report_text(padding + GOOD))
        assert reply.status == 413
        assert page.service.store.figures.latest() is None


async def test_values_at_the_bounds_are_taken(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        figures = f'"loss": {MAX_LOSS}, "samples_per_second": 0, "alive_peers": {MAX_PEERS}'
        assert (await page.raw_report(report_text(figures))).status == 200
        latest = page.service.store.figures.latest()
        assert latest is not None
        assert latest.figures == EpochFigures(1, 1700000000.0, MAX_LOSS, 0.0, MAX_PEERS)


async def test_an_open_projects_coordinator_takes_a_moderators_reports(tmp_path: Path) -> None:
    async with running_page(tmp_path, mode="open") as page:
        assert page.service.manifest.access.mode == "open"
        reply = await page.report(0, loss=3.0, samples_per_second=2.0, alive_peers=1)
        assert reply.status == 200, reply
        # a volunteer's account may log in, but not report
        page.add_user("alice")
        alice = (await page.client.login("alice"))["session"]
        refused = await page.client.post(
            "/contributions",
            {"epoch": 1, "time": page.clock.time(), "samples": 0, "contributions": []},
            token=alice,
        )
        assert refused.status == 403
        assert (await page.client.login(AUX, PASSWORD))["role"] == "moderator"


def test_the_peer_sends_only_figures_the_coordinator_takes() -> None:
    fine = EpochMetrics(3, 2.5, 640, 50.0, 4, 1_700_000_000.0).contribution_report()
    assert (fine["loss"], fine["samples_per_second"], fine["alive_peers"]) == (2.5, 50.0, 4)
    for loss, speed in ((math.nan, math.inf), (-1.0, -1.0), (1e7, 1e10), (None, 0.0)):
        report = EpochMetrics(3, loss, 640, speed, 4, 1_700_000_000.0).contribution_report()
        assert report["loss"] is None
        assert report["samples_per_second"] in (None, 0.0)
    many = EpochMetrics(3, 1.0, 640, 1.0, MAX_PEERS + 1, 1_700_000_000.0).contribution_report()
    assert many["alive_peers"] is None


def test_a_long_run_is_averaged_to_a_curve_of_few_points(tmp_path: Path) -> None:
    with CoordinatorStore(tmp_path / "c.db") as store:
        for epoch in range(3 * MOST_POINTS + 7):
            store.figures.record(EpochFigures(epoch, 1.0 + epoch, 10.0 - epoch / 1000, 1.0, 1), 5.0)
        points = store.figures.losses(MOST_POINTS)
        assert 0 < len(points) <= MOST_POINTS
        assert points[0][0] < points[-1][0]
        assert points[0][1] > points[-1][1]
        assert points[0] == pytest.approx((1.5, 10.0 - 1.5 / 1000))  # epochs 0..3 averaged
        # a run that starts again forgets its figures with its leaderboard
        store.start_new_leaderboard()
        assert store.figures.losses(MOST_POINTS) == []
        assert store.figures.latest() is None


async def test_a_number_too_large_for_a_float_is_a_400_not_a_failure(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        huge = "9" * 4000
        text = f'{{"epoch": 1, "time": {huge}, "samples": 10, "contributions": []}}'
        reply = await page.raw_report(text)
        assert reply.status == 400
        assert reply.body["error"].startswith("time must be")
        peer = Identity.generate().peer_id
        entry = f'{{"peer": "{peer}", "samples": 1, "compute_seconds": {huge}}}'
        text = f'{{"epoch": 1, "time": 1700000000.0, "samples": 10, "contributions": [{entry}]}}'
        reply = await page.raw_report(text)
        assert reply.status == 200
        (rejected,) = reply.body["rejected"]
        assert rejected["reason"].startswith("compute_seconds must be")


def test_a_schema_4_database_gains_the_figures_table(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    old = SqliteFile("coordinator database", APPLICATION_ID, _MIGRATIONS[:4], StoreError)
    conn = old.open(path)
    with conn:
        conn.execute("INSERT INTO epochs (epoch, samples, time) VALUES (7, 70, 1.0)")
    conn.close()
    with CoordinatorStore(path) as store:
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert store.figures.latest() is None
        assert store.figures.newest_epoch() == 7
        store.figures.record(EpochFigures(8, 2.0, 1.5, 3.0, 1), 10.0)
        assert store.figures.newest_epoch() == 8
        assert store.figures.losses(MOST_POINTS) == [(8.0, 1.5)]
