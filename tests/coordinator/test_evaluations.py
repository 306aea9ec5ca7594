"""The backbone's held-out evaluations at the coordinator: hostile reports are refused whole with
the field named, the newest per epoch is kept (an epoch never reported too), and the project page
and ``/stats`` show the held-out curve and the latest figures only once there are some."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import time
from pathlib import Path
from typing import Any

import pytest

from core.cli.peer import command as peer_cli
from core.cli.peer.model_export import ModelExport
from core.config.environment import PASSWORD_VARIABLE
from core.coordinator import CoordinatorStore
from core.coordinator.errors import StoreError
from core.coordinator.page.curve import MOST_POINTS
from core.coordinator.schema import _MIGRATIONS, APPLICATION_ID, SCHEMA_VERSION
from core.training.peer.project_peer import PeerSettings
from core.trust.published_model import HeldOut
from core.trust.reports import MAX_LOSS, Evaluation, evaluation_report
from core.util.files.sqlite_file import SqliteFile
from core.worker.events import PeerEvaluation
from tests.coordinator.conftest import PASSWORD, Reply
from tests.coordinator.page_support import AUX, Page, page_manifest, running_page
from tests.coordinator.test_page import figure

GOOD: dict[str, Any] = {
    "epoch": 4,
    "loss": 3.25,
    "accuracy": 0.4,
    "samples": 256,
    "tokens": 4096,
    "seconds": 12.5,
    "time": 1_700_000_000.0,
}


def text_of(fields: dict[str, Any], **changes: str) -> str:
    """The JSON of ``fields`` with some values replaced by raw text (NaN, huge numbers)."""
    parts = [f'"{name}": {changes.get(name, json.dumps(value))}' for name, value in fields.items()]
    return "{" + ", ".join(parts) + "}"


async def post_text(page: Page, text: str) -> Reply:
    return await page.client.request("POST", "/evaluations", data=text.encode(), token=page.token)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"loss": "NaN"}, "loss"),
        ({"loss": "Infinity"}, "loss"),
        ({"loss": "-0.5"}, "loss"),
        ({"loss": "1e300"}, "loss"),
        ({"loss": "9" * 3800}, "loss"),  # too large for a float
        ({"loss": "null"}, "loss"),
        ({"loss": '"3.2"'}, "loss"),
        ({"loss": "true"}, "loss"),
        ({"accuracy": "1.01"}, "accuracy"),
        ({"accuracy": "-0.1"}, "accuracy"),
        ({"accuracy": "NaN"}, "accuracy"),
        ({"accuracy": "[0.5]"}, "accuracy"),
        ({"samples": "-1"}, "samples"),
        ({"samples": "2.5"}, "samples"),
        ({"samples": "true"}, "samples"),
        ({"tokens": "-4"}, "tokens"),
        ({"tokens": '"4096"'}, "tokens"),
        ({"tokens": str(2**60)}, "tokens"),
        ({"epoch": "-1"}, "epoch"),
        ({"epoch": "1.5"}, "epoch"),
        ({"epoch": "false"}, "epoch"),
        ({"epoch": "null"}, "epoch"),
        ({"seconds": "-1"}, "seconds"),
        ({"seconds": "Infinity"}, "seconds"),
        ({"time": "0"}, "time"),
        ({"time": "-5"}, "time"),
        ({"time": '"now"'}, "time"),
        ({"time": "4000000000"}, "time"),  # in the future: the peer's clock is wrong
    ],
)
async def test_hostile_evaluations_are_refused_and_nothing_is_stored(
    tmp_path: Path, changes: dict[str, str], named: str
) -> None:
    async with running_page(tmp_path) as page:
        reply = await post_text(page, text_of(GOOD, **changes))
        assert reply.status == 400, reply
        assert reply.body["code"] == "bad_request"
        assert reply.body["error"].startswith(named), reply.body
        assert page.service.store.evaluations.latest() is None
        # a good one after it is taken
        reply = await post_text(page, text_of(GOOD))
        assert reply.status == 200, reply


async def test_a_missing_field_or_a_body_that_is_no_object_is_refused(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        for name in GOOD:
            partial = {key: value for key, value in GOOD.items() if key != name}
            reply = await page.client.post("/evaluations", partial, token=page.token)
            assert reply.status == 400, (name, reply)
            assert reply.body["error"].startswith(name)
        reply = await post_text(page, "[1, 2]")
        assert reply.status == 400
        reply = await post_text(page, text_of({**GOOD, "pad": "x" * 5000}))
        assert reply.status == 413
        assert page.service.store.evaluations.latest() is None


async def test_only_a_moderators_session_may_report(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        page.add_user("alice")
        alice = (await page.client.login("alice"))["session"]
        assert (await page.client.post("/evaluations", GOOD, token=alice)).status == 403
        assert (await page.client.post("/evaluations", GOOD)).status == 401
        assert page.service.store.evaluations.latest() is None


async def test_the_bounds_are_taken_and_an_epoch_never_reported_is_stored(
    tmp_path: Path,
) -> None:
    async with running_page(tmp_path) as page:
        reply = await page.evaluate(9, MAX_LOSS, accuracy=1, samples=0, tokens=0, seconds=0)
        assert reply.status == 200, reply
        assert reply.body == {"epoch": 9, "stored": True}
        assert page.service.store.figures.newest_epoch() is None  # no epoch was reported
        stored = page.service.store.evaluations.latest()
        assert stored == Evaluation(9, page.clock.time(), MAX_LOSS, 1.0, 0, 0, 0.0)
        assert (await page.evaluate(10, 0.0, accuracy=0)).status == 200


def test_the_store_keeps_the_newest_evaluation_of_each_epoch(tmp_path: Path) -> None:
    with CoordinatorStore(tmp_path / "c.db") as store:
        first = Evaluation(3, 100.0, 4.0, 0.2, 256, 4096, 10.0)
        assert store.evaluations.record(first, 1.0)
        assert not store.evaluations.record(first, 2.0)  # sent again: nothing changes
        older = Evaluation(3, 50.0, 9.0, 0.1, 256, 4096, 10.0)
        assert not store.evaluations.record(older, 3.0)  # measured before: not the newest
        assert store.evaluations.get(3) == first
        again = Evaluation(3, 200.0, 3.5, 0.3, 512, 8192, 11.0)  # measured again (a rollback)
        assert store.evaluations.record(again, 4.0)
        assert store.evaluations.get(3) == again
        store.evaluations.record(Evaluation(1, 20.0, 5.0, 0.1, 256, 4096, 9.0), 5.0)
        assert store.evaluations.latest() == again  # the highest epoch, whenever it arrived
        assert store.evaluations.losses(MOST_POINTS) == [(1.0, 5.0), (3.0, 3.5)]
        # a run that starts again forgets them with its figures
        store.start_new_leaderboard()
        assert store.evaluations.latest() is None


def test_a_long_run_of_evaluations_is_averaged_to_few_points(tmp_path: Path) -> None:
    with CoordinatorStore(tmp_path / "c.db") as store:
        for epoch in range(0, 6 * MOST_POINTS, 2):
            store.evaluations.record(Evaluation(epoch, 1.0, 9.0 - epoch / 1000, 0.5, 1, 1, 1.0), 1)
        points = store.evaluations.losses(MOST_POINTS)
        assert 0 < len(points) <= MOST_POINTS
        assert points[0][0] < points[-1][0]


def test_a_schema_6_database_gains_the_evaluations_table(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    old = SqliteFile("coordinator database", APPLICATION_ID, _MIGRATIONS[:6], StoreError)
    conn = old.open(path)
    with conn:
        conn.execute(
            "INSERT INTO figures (epoch, time, loss, samples_per_second, alive_peers, received) "
            "VALUES (7, 1.0, 2.5, 1.0, 1, 1.0)"
        )
    conn.close()
    with CoordinatorStore(path) as store:
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert store.evaluations.latest() is None
        assert store.figures.newest_epoch() == 7
        store.evaluations.record(Evaluation(7, 2.0, 2.75, 0.5, 10, 100, 1.0), 3.0)
        assert store.evaluations.losses(MOST_POINTS) == [(7.0, 2.75)]


async def four_epochs_two_evaluations(page: Page) -> None:
    for epoch, loss in enumerate((6.0, 5.0, 4.5, 4.0)):
        assert (await page.report(epoch, loss=loss, samples_per_second=10.0)).status == 200
        page.clock.advance(30)
    assert (await page.evaluate(1, 5.5, accuracy=0.125)).status == 200
    assert (await page.evaluate(3, 4.75, accuracy=0.3125, samples=512)).status == 200


async def test_the_page_and_stats_show_the_held_out_curve_and_latest_figures(
    tmp_path: Path,
) -> None:
    async with running_page(tmp_path) as page:
        await four_epochs_two_evaluations(page)
        stats = (await page.client.get("/stats")).body
        assert stats["evaluation"]["epoch"] == 3
        assert stats["evaluation"]["loss"] == 4.75
        assert stats["evaluation"]["accuracy"] == 0.3125
        assert stats["evaluation"]["samples"] == 512
        held_out = stats["curve"]["held_out"]
        assert held_out["points"] == 2
        # on the training curve's scale: epochs 0..3 across, losses 4..6 down
        assert held_out["path"] == "M202.7 54.0 L592.0 123.0"
        assert held_out["dots"] == "M202.7 54.0 h0.1 M592.0 123.0 h0.1"
        assert stats["curve"]["points"] == 4
        assert stats["curve"]["losses"] == [4.0, 6.0]
        shown = stats["display"]
        assert shown["held_out_loss"] == "4.75"
        assert shown["held_out_accuracy"] == "31.2%"
        assert shown["held_out_when"] == "at epoch 3, on 512 held-out sequences"

        _, html, _ = await page.text("/")
        assert figure(html, "held_out_loss") == "4.75"
        assert figure(html, "held_out_accuracy") == "31.2%"
        assert figure(html, "held_out_when") == "at epoch 3, on 512 held-out sequences"
        assert '<div id="held-out" class="held-out">' in html
        assert '<p id="curve-legend" class="legend">' in html
        path = re.search(r'<path id="held-out-path"[^>]*>', html)
        assert path
        assert 'd="M202.7 54.0 L592.0 123.0"' in path.group(0)
        assert 'data-points="2"' in path.group(0)
        assert "Held-out loss" in html
        assert "Training loss" in html


async def test_without_evaluations_the_page_says_nothing_of_them(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        for epoch, loss in enumerate((6.0, 5.0)):
            assert (await page.report(epoch, loss=loss)).status == 200
        stats = (await page.client.get("/stats")).body
        assert stats["evaluation"] is None
        assert stats["curve"]["held_out"] == {"points": 0, "path": "", "dots": ""}
        assert stats["display"]["held_out_loss"] == ""
        _, html, _ = await page.text("/")
        # the script's places are there, hidden and empty, for the first evaluation to fill
        assert '<div id="held-out" class="held-out" hidden>' in html
        assert '<p id="curve-legend" class="legend" hidden>' in html
        assert figure(html, "held_out_loss") == ""
        assert re.search(r'<path id="held-out-path"[^>]* d=""', html)


async def test_a_held_out_curve_alone_is_drawn(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        assert (await page.evaluate(2, 4.0)).status == 200
        stats = (await page.client.get("/stats")).body
        assert stats["curve"]["points"] == 0
        assert stats["curve"]["held_out"]["path"] == "M300.0 100.0 h0.1"
        _, html, _ = await page.text("/")
        assert '<p id="curve-empty" hidden>' in html


def test_the_peer_reports_only_evaluations_the_coordinator_takes() -> None:
    def result(loss: float | None, accuracy: float = 0.5) -> PeerEvaluation:
        return PeerEvaluation(5, loss, accuracy, 256, 4096, 3.0, 1_700_000_000.0)

    report = evaluation_report(result(3.5))
    assert report == {**GOOD, "epoch": 5, "loss": 3.5, "accuracy": 0.5, "seconds": 3.0}
    for loss in (None, math.nan, math.inf, -1.0, MAX_LOSS * 2):
        assert evaluation_report(result(loss)) is None
    clamped = evaluation_report(result(2.0, accuracy=1.0000001))
    assert clamped is not None
    assert clamped["accuracy"] == 1.0


@pytest.mark.parametrize("mode", ["open", "moderated"])
async def test_the_aux_peer_reports_its_evaluations_and_keeps_them_for_its_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    async with running_page(tmp_path, mode=mode) as page:
        manifest = tmp_path / "project.toml"
        text = page_manifest(page.key, mode=mode).replace("http://127.0.0.1:8470", page.service.url)
        manifest.write_text(text)
        key_file = tmp_path / "project-key.pem"
        page.key.save(key_file)
        page.clock.advance(time.time() - page.clock.time())  # the peer checks its pass by its clock
        when = page.clock.time()
        served: list[PeerSettings] = []

        async def serve(settings: PeerSettings, stop: asyncio.Event) -> int:
            # what the backbone does after each held-out evaluation, here twice
            assert settings.on_evaluation is not None
            settings.on_evaluation(PeerEvaluation(6, 3.5, 0.25, 128, 2048, 1.5, when))
            settings.on_evaluation(PeerEvaluation(8, None, 0.0, 128, 2048, 1.5, when))
            served.append(settings)
            return 0

        monkeypatch.setattr(peer_cli, "_serve", serve)
        monkeypatch.setattr(peer_cli, "stop_on_signals", lambda stop: None)
        monkeypatch.setenv(PASSWORD_VARIABLE, PASSWORD)
        parser = argparse.ArgumentParser()
        peer_cli.register(parser.add_subparsers())
        args = parser.parse_args(
            [
                "aux",
                "--manifest",
                str(manifest),
                "--username",
                AUX,
                "--work-dir",
                str(tmp_path / "work"),
                "--publish-checkpoints",
                str(tmp_path / "published"),
                "--project-key",
                str(key_file),
            ]
        )
        assert await peer_cli._run(args) == 0
        # the queued evaluation was sent before the peer logged out; the one without a loss not
        assert page.service.store.evaluations.latest() == Evaluation(
            6, when, 3.5, 0.25, 128, 2048, 1.5
        )
        # and the models published beside the checkpoints carry it
        (settings,) = served
        assert settings.publishing is not None
        export = settings.publishing.beside
        assert isinstance(export, ModelExport)
        assert export.history.at_or_before(9) == HeldOut(6, 3.5, 0.25, 128)
