"""The backbone's held-out evaluations at the coordinator: hostile reports are refused whole with
the field named, the newest per epoch is kept (an epoch never reported too), and the project page
and ``/stats`` show the held-out curve and the latest figures only once there are some, with the
unigram floor as a line and in words where the backbone reported one."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
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
    "floor": None,
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
        ({"floor": "NaN"}, "floor"),
        ({"floor": "-1"}, "floor"),
        ({"floor": "1e300"}, "floor"),
        ({"floor": '"6.2"'}, "floor"),
        ({"floor": "true"}, "floor"),
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
        for name in GOOD.keys() - {"floor"}:  # the floor alone may be missing
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


async def test_a_floor_is_stored_and_a_report_without_one_still_taken(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        assert (await page.evaluate(2, 5.0, floor=6.25)).status == 200
        stored = page.service.store.evaluations.get(2)
        assert stored is not None
        assert stored.floor == 6.25
        # an older backbone names none
        older = {key: value for key, value in GOOD.items() if key != "floor"}
        older["time"] = page.clock.time()
        assert (await page.client.post("/evaluations", older, token=page.token)).status == 200
        latest = page.service.store.evaluations.latest()
        assert latest is not None
        assert (latest.epoch, latest.floor) == (4, None)
        assert (await page.client.get("/stats")).body["evaluation"]["floor"] is None


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


def test_a_schema_8_database_keeps_its_evaluations_without_a_floor(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    old = SqliteFile("coordinator database", APPLICATION_ID, _MIGRATIONS[:8], StoreError)
    conn = old.open(path)
    with conn:
        conn.execute(
            "INSERT INTO evaluations (epoch, time, loss, accuracy, samples, tokens, seconds, "
            "received) VALUES (5, 1.0, 4.5, 0.25, 256, 4096, 2.0, 1.0)"
        )
    conn.close()
    with CoordinatorStore(path) as store:
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert store.evaluations.latest() == Evaluation(5, 1.0, 4.5, 0.25, 256, 4096, 2.0)
        # measured again, now with a floor: the row takes it
        store.evaluations.record(Evaluation(5, 2.0, 4.25, 0.25, 256, 4096, 2.0, 6.0), 3.0)
        assert store.evaluations.get(5) == Evaluation(5, 2.0, 4.25, 0.25, 256, 4096, 2.0, 6.0)


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


async def test_the_floor_is_a_line_on_the_curve_and_words_beside_the_loss(
    tmp_path: Path,
) -> None:
    async with running_page(tmp_path) as page:
        for epoch, loss in enumerate((6.0, 5.0, 4.5, 4.0)):
            assert (await page.report(epoch, loss=loss)).status == 200
        assert (await page.evaluate(1, 5.5, floor=7.0)).status == 200
        assert (await page.evaluate(3, 4.75, floor=7.0)).status == 200
        stats = (await page.client.get("/stats")).body
        assert stats["evaluation"]["floor"] == 7.0
        curve = stats["curve"]
        # the scale reaches up to the floor (4 to 7), which is a level line across the plot
        assert curve["losses"] == [4.0, 7.0]
        assert curve["floor"] == {"value": 7.0, "path": "M0 8.0 H600"}
        assert curve["held_out"]["path"] == "M202.7 100.0 L592.0 146.0"
        words = "2.25 below the unigram floor (7.00): what a model that only counts words scores"
        assert stats["display"]["held_out_floor"] == words
        assert stats["display"]["curve_top"] == "7"

        _, html, _ = await page.text("/")
        assert figure(html, "held_out_floor") == words
        assert '<p id="held-out-floor" class="note">' in html
        line = re.search(r'<path id="floor-path"[^>]*>', html)
        assert line
        assert 'd="M0 8.0 H600"' in line.group(0)
        assert 'class="floor"' in line.group(0)
        assert (
            '<span id="floor-key" class="key floor">unigram floor (a model that only counts '
            "words)</span>"
        ) in html


async def test_a_loss_above_the_floor_says_so(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        assert (await page.evaluate(1, 8.25, floor=6.25)).status == 200
        shown = (await page.client.get("/stats")).body["display"]
        assert shown["held_out_floor"].startswith("2.00 above the unigram floor (6.25)")


async def test_without_evaluations_the_page_says_nothing_of_them(tmp_path: Path) -> None:
    async with running_page(tmp_path) as page:
        for epoch, loss in enumerate((6.0, 5.0)):
            assert (await page.report(epoch, loss=loss)).status == 200
        stats = (await page.client.get("/stats")).body
        assert stats["evaluation"] is None
        assert stats["curve"]["held_out"] == {"points": 0, "path": "", "dots": ""}
        assert stats["curve"]["floor"] == {"value": None, "path": ""}
        assert stats["display"]["held_out_loss"] == ""
        assert stats["display"]["held_out_floor"] == ""
        _, html, _ = await page.text("/")
        # the script's places are there, hidden and empty, for the first evaluation to fill
        assert '<div id="held-out" class="held-out" hidden>' in html
        assert '<p id="curve-legend" class="legend" hidden>' in html
        assert '<p id="held-out-floor" class="note" hidden>' in html
        assert '<span id="floor-key" class="key floor" hidden>' in html
        assert figure(html, "held_out_loss") == ""
        assert re.search(r'<path id="held-out-path"[^>]* d=""', html)
        assert re.search(r'<path id="floor-path"[^>]* d=""', html)


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
    floored = evaluation_report(dataclasses.replace(result(3.5), floor=6.25))
    assert floored is not None
    assert floored["floor"] == 6.25
    # a floor the coordinator would refuse is left out; the loss is still reported
    for floor in (math.nan, -1.0, MAX_LOSS * 2):
        wild = evaluation_report(dataclasses.replace(result(3.5), floor=floor))
        assert wild is not None
        assert (wild["loss"], wild["floor"]) == (3.5, None)
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
