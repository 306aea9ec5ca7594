"""Statistics page: the engine's contribution ledger as tiles in words and bar charts by day.

What is checked: the tiles carry the sample data's totals in plain words (counts, a duration, data
sizes) with today's amounts under them; each chart has one bar per day with the engine's numbers and
an accessible description with the totals; choosing another period reads that many days; without any
contribution the charts say so; a bar describes itself by day and exact value; the model's chart
draws the held-out loss beside the training loss and the unigram floor as a dashed level line, with
a legend, and the newest held-out figures (with where they stand against the floor) show as a
tile, updated by the engine's events.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app import wording
from app.pages.statistics import StatisticsPage
from app.window import MainWindow
from core.api.schema import Statistics
from core.api.testing import FakeEngine

EMPTY = "nothing contributed in this period yet"


def statistics_page(window: MainWindow) -> StatisticsPage:
    window.show_page("statistics")
    page = window.page["statistics"]
    assert isinstance(page, StatisticsPage)
    return page


def engine_statistics(window: MainWindow) -> Statistics:
    statistics = window.store.statistics
    assert statistics is not None
    return statistics


def test_tiles_show_the_totals_in_words(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = statistics_page(make_window(fake))
    qtbot.waitUntil(lambda: page.samples.value.text() != "–", timeout=10_000)
    # the sample ledger: 264,293,157 samples, 967,610 s, 17.3 and 19.6 GB, 64,489 epochs
    assert page.samples.value.text() == "264 M"
    assert page.samples.caption.text() == "2.18 M today"
    assert page.compute.value.text() == "11 d 4 h"
    assert page.compute.caption.text() == "2 h 24 min today"
    assert page.sent.value.text() == "17.3 GB"
    assert page.sent.caption.text() == "149 MB today"
    assert page.received.value.text() == "19.6 GB"
    assert page.received.caption.text() == "145 MB today"
    assert page.epochs.value.text() == "64.5 k"
    assert page.epochs.caption.text() == "64,489 averaging rounds"
    assert page.samples.accessibleDescription() == "264 M 2.18 M today"


def test_each_chart_has_one_bar_per_day_and_describes_its_totals(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    page = statistics_page(window)
    qtbot.waitUntil(lambda: len(page.samples_chart.days) == 30, timeout=10_000)
    days = engine_statistics(window).days
    names = [d.day for d in days]
    samples = [d.amounts.samples for d in days]
    hours = [d.amounts.compute_seconds / 3600 for d in days]
    sent = [d.amounts.bytes_sent / 1e6 for d in days]
    received = [d.amounts.bytes_received / 1e6 for d in days]
    assert names == sorted(names)  # oldest first
    assert len(set(names)) == 30
    for chart in (page.samples_chart, page.hours_chart, page.data_chart):
        assert chart.days == names, chart.accessibleName()
        assert chart.empty_text == ""
    assert page.samples_chart.series == {"samples": samples}
    assert page.hours_chart.series == {"hours": pytest.approx(hours)}
    assert page.data_chart.series == {
        "sent": pytest.approx(sent),
        "received": pytest.approx(received),
    }
    assert 0 in samples  # the days off are bars too, of height 0
    assert page.samples_chart.accessibleDescription() == (
        f"30 days; samples total {sum(samples):,.1f} samples"
    )
    assert page.hours_chart.accessibleDescription() == (
        f"30 days; hours total {sum(hours):,.1f} hours"
    )
    assert page.data_chart.accessibleDescription() == (
        f"30 days; sent total {sum(sent):,.1f} MB, received total {sum(received):,.1f} MB"
    )
    assert page.samples_chart.chart().title() == "Samples per day, in millions"


def test_choosing_the_last_7_days_reads_7_days(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    page = statistics_page(window)
    qtbot.waitUntil(lambda: len(page.samples_chart.days) == 30, timeout=10_000)
    reads = fake.calls.count("statistics")
    page.period.setFocus()
    qtbot.keyClick(page.period, Qt.Key.Key_Up)  # from "Last 30 days" to the one above
    assert page.period.currentText() == "Last 7 days"
    qtbot.waitUntil(lambda: len(page.samples_chart.days) == 7, timeout=10_000)
    assert fake.calls.count("statistics") > reads
    assert window.store.statistics_days == 7
    assert len(engine_statistics(window).days) == 7
    assert page.hours_chart.days == page.samples_chart.days
    assert len(page.data_chart.series["sent"]) == 7
    assert page.samples_chart.accessibleDescription().startswith("7 days; ")


def test_without_contribution_the_charts_say_so(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    page = window.page["statistics"]
    assert isinstance(page, StatisticsPage)
    qtbot.waitUntil(lambda: page.samples.value.text() != "–", timeout=10_000)
    for chart in (page.samples_chart, page.hours_chart, page.data_chart):
        assert chart.empty_text == EMPTY, chart.accessibleName()
        assert chart.accessibleDescription() == EMPTY
        assert chart.chart().title().endswith(f" — {EMPTY}")
        assert chart.chart().series() == []
        assert len(chart.days) == 30  # the days are known, there is nothing in them
    assert page.samples.value.text() == "0"
    assert page.compute.value.text() == "0 s"
    assert page.sent.value.text() == "0 B"


def test_a_bar_describes_its_day_and_exact_value(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    page = statistics_page(window)
    qtbot.waitUntil(lambda: len(page.samples_chart.days) == 30, timeout=10_000)
    days = engine_statistics(window).days
    index = max(range(len(days)), key=lambda i: days[i].amounts.samples)
    day = days[index]
    text = page.samples_chart.describe_bar(index)
    assert text.startswith(f"{wording.day_label(day.day, month=True)}: ")
    assert f"{day.amounts.samples:,} " in text
    assert text.endswith(" samples")
    sent, received = day.amounts.bytes_sent / 1e6, day.amounts.bytes_received / 1e6
    assert page.data_chart.describe_bar(index) == (
        f"{wording.day_label(day.day, month=True)}: sent {sent:,.1f} MB, received {received:,.1f} MB"
    )
    off = next(i for i, d in enumerate(days) if d.amounts.samples == 0)
    assert page.samples_chart.describe_bar(off).endswith(" 0 samples")


def test_a_one_series_bar_names_its_unit_once(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    page = statistics_page(window)
    qtbot.waitUntil(lambda: len(page.samples_chart.days) == 30, timeout=10_000)
    day = engine_statistics(window).days[0]
    assert page.samples_chart.describe_bar(0) == (
        f"{wording.day_label(day.day, month=True)}: {day.amounts.samples:,} samples"
    )


def test_the_model_chart_draws_the_held_out_loss_beside_the_training_loss(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = statistics_page(make_window(fake))
    qtbot.waitUntil(lambda: page.loss_chart.count == len(fake.history_), timeout=10_000)
    chart = page.loss_chart
    assert list(chart.lines) == ["training loss", "held-out loss"]
    assert chart.lines["held-out loss"] == [(float(e.epoch), e.loss) for e in fake.held_out_]
    assert [s.name() for s in chart.chart().series()] == [
        "training loss",
        "held-out loss",
        wording.FLOOR_NAME,
    ]
    assert chart.chart().legend().isVisible()
    assert "held-out loss: 15 points" in chart.accessibleDescription()
    newest = fake.held_out_[-1]
    assert newest.loss is not None
    assert newest.floor is not None
    assert page.held_out.value.text() == f"{newest.loss:.3f}"
    assert page.held_out.caption.text() == (
        f"{100 * newest.accuracy:.1f} % of tokens right, epoch {newest.epoch}; "
        f"{newest.floor - newest.loss:.2f} below the unigram floor (6.24)"
    )
    # a new evaluation reaches the page as the engine tells it
    fake.advance(loss=4.25)
    fake.evaluate(loss=4.375, accuracy=0.5, floor=6.25)
    qtbot.waitUntil(lambda: page.held_out.value.text() == "4.375", timeout=10_000)
    assert page.held_out.caption.text() == (
        "50.0 % of tokens right, epoch 150; 1.88 below the unigram floor (6.25)"
    )
    assert chart.lines["held-out loss"][-1] == (150.0, 4.375)
    assert chart.lines["training loss"][-1] == (150.0, 4.25)
    assert chart.levels == {wording.FLOOR_NAME: 6.25}


def test_the_floor_is_a_dashed_level_line_across_the_held_out_curve(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = statistics_page(make_window(fake))
    qtbot.waitUntil(lambda: page.loss_chart.count == len(fake.history_), timeout=10_000)
    chart = page.loss_chart
    assert chart.levels == {wording.FLOOR_NAME: 6.24}
    (level,) = [s for s in chart.chart().series() if s.name() == wording.FLOOR_NAME]
    assert level.pen().style() == Qt.PenStyle.DashLine
    ends = [(p.x(), p.y()) for p in level.points()]
    assert [y for _, y in ends] == [6.24, 6.24]
    first, last = fake.history_[0].epoch, fake.history_[-1].epoch
    assert ends[0][0] <= first
    assert ends[1][0] >= last  # across the whole curve
    assert f"{wording.FLOOR_NAME}: 6.240" in chart.accessibleDescription()
    # an older backbone's evaluation has no floor: the line stays, the caption says the loss alone
    fake.evaluate(loss=4.5, accuracy=0.5)
    qtbot.waitUntil(lambda: page.held_out.value.text() == "4.500", timeout=10_000)
    assert page.held_out.caption.text() == "50.0 % of tokens right, epoch 149"
    assert chart.levels == {wording.FLOOR_NAME: 6.24}


def test_without_a_floor_the_chart_draws_no_level_line(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    fake.held_out_ = [dataclasses.replace(e, floor=None) for e in fake.held_out_]
    page = statistics_page(make_window(fake))
    qtbot.waitUntil(lambda: page.loss_chart.count == len(fake.history_), timeout=10_000)
    assert page.loss_chart.levels == {}
    names = [s.name() for s in page.loss_chart.chart().series()]
    assert names == ["training loss", "held-out loss"]
    assert "floor" not in page.held_out.caption.text()


def test_without_evaluations_the_held_out_figure_says_it_is_not_measured(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    fake.held_out_ = []
    page = statistics_page(make_window(fake))
    qtbot.waitUntil(lambda: page.loss_chart.count == len(fake.history_), timeout=10_000)
    assert list(page.loss_chart.lines) == ["training loss"]
    assert not page.loss_chart.chart().legend().isVisible()
    assert page.held_out.value.text() == "–"
    assert page.held_out.caption.text().startswith("not measured yet")
