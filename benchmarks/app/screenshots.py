"""A PNG of every page of the desktop app, with realistic data from the fake engine.

    python -m benchmarks.app.screenshots OUTDIR [--width 1100 --height 760] [--only NAME ...]

Runs offscreen (unless QT_QPA_PLATFORM says otherwise): the real window, bridge and store, with a
``FakeEngine`` on the far side. Writes one PNG per page and state (first run's three steps, joining
by a project URL (a bare host refused, the project's preview, a refused update on the dashboard), the
dashboard contributing, waiting and paused, schedule, statistics (and scrolled to the model: training
and held-out loss beside the unigram floor's dashed line, then "Try the model" below it answering a
sentence with a missing word), projects, the leaderboard logged in, stale and logged out, events,
the engine-stopped banner, the tray menu and its four icons, the close question) and
``index.json`` listing them. Look at them after changing the GUI; keep them out of git.
``--only NAME`` (repeatable) takes only the shots whose file name contains NAME, running just the
groups that take them (``--only 07b --only 07c``: the statistics page's model).

Then the coordinator's project page (``page_browser.py`` beside this one): a real coordinator on this
machine with a project's sample figures (held-out evaluations and their floor included),
photographed whole by headless Chromium at a desktop's and a phone's width (``project-page.png``,
``project-page-phone.png``) and a volunteer's page (``project-user-page.png``). Without Chromium
those are skipped, with a note in ``index.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QEvent, QPoint, QTimer
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QApplication, QScrollArea, QScrollBar, QWidget

from app.engine.bridge import EngineBridge
from app.engine.preview import FakeConnector
from app.engine.store import EngineStore
from app.icons import tray_icon
from app.pages.statistics import StatisticsPage
from app.settings import AppSettings
from app.theme import apply_theme
from app.tray import Tray
from app.window import CloseQuestion, MainWindow
from benchmarks.app.page_browser import (
    LiveCoordinator,
    chromium,
    chromium_missing,
    full_page_png,
    sample_project,
)
from core.api.events import ErrorRaised
from core.api.testing import FakeEngine
from core.api.testing.sample_data import REMOTE_PREVIEW

TRY_SENTENCE = "Volunteers share their computers to train a ___."
"""The question photographed in "Try the model" (the fake model's best guess for it: "model")."""


class Shooter:
    def __init__(self, out: Path, size: tuple[int, int], only: Sequence[str] = ()) -> None:
        self.out = out
        self.size = size
        self.only = tuple(only)
        self.group: tuple[str, ...] = ()
        """The shots the running group declares in ``GROUPS``."""
        self.saved: list[dict[str, object]] = []
        self.bridges: list[EngineBridge] = []

    def wants(self, name: str) -> bool:
        """Whether ``--only`` keeps the shot ``name`` (every shot without it)."""
        return not self.only or any(part in name for part in self.only)

    def wait(self, condition: Callable[[], bool], seconds: float = 10.0) -> None:
        deadline = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError("the window did not reach the state to photograph")
            QApplication.processEvents()
            time.sleep(0.01)

    def settle(self, seconds: float = 0.4) -> None:
        """Let layouts, charts and queued answers finish before the picture."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            QApplication.processEvents()
            # widgets a page replaced are deleted when the event loop turns, which processEvents
            # alone never does: without this, a removed placeholder is still painted
            QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
            time.sleep(0.01)

    def save(self, name: str, widget: QWidget | QPixmap, what: str) -> None:
        if name not in self.group:
            raise ValueError(f"{name} is missing from its group's shots in GROUPS")
        if not self.wants(name):
            return
        picture = widget if isinstance(widget, QPixmap) else widget.grab()
        path = self.out / f"{name}.png"
        if not picture.save(str(path)):
            raise OSError(f"could not write {path}")
        self.saved.append(
            {"file": path.name, "shows": what, "width": picture.width(), "height": picture.height()}
        )
        print(f"{path.name:32} {what}", flush=True)

    def window(self, engine: FakeEngine) -> MainWindow:
        bridge = EngineBridge(FakeConnector(engine))
        self.bridges.append(bridge)
        store = EngineStore(bridge)
        bridge.start()
        self.wait(
            lambda: store.connected and store.projects is not None and store.settings is not None
        )
        settings = AppSettings(self.out / ".screenshots-app.ini")
        window = MainWindow(store, settings, tray_available=True, can_start_demo=True)
        window.resize(*self.size)
        window.show()
        self.settle(0.8)
        return window

    def close(self) -> None:
        for bridge in self.bridges:
            bridge.stop()


def shoot(out: Path, size: tuple[int, int], only: Sequence[str] = ()) -> list[dict[str, object]]:
    """Every group of shots in ``GROUPS`` that takes one ``only`` keeps: the files saved."""
    s = Shooter(out, size, only)
    try:
        for group, names in GROUPS:
            if any(s.wants(name) for name in names):
                s.group = names
                group(s)
    finally:
        s.close()
    return s.saved


def _first_run(s: Shooter) -> None:
    fresh = FakeEngine("fresh")
    window = s.window(fresh)
    first = window.first_run
    s.wait(lambda: first.offer_list.count() > 0)
    s.save("01-first-run-project", window, "first run, step 1: the local demo swarm is offered")
    first.next_button.click()
    s.wait(lambda: first.steps.currentIndex() == 1)
    first.login.username.setText("robin")
    s.settle()
    s.save("02-first-run-account", window, "first run, step 2: log in or create an account")
    first.login.password.setText("a long password")
    first.login.signup_button.click()
    s.wait(lambda: first.steps.currentIndex() == 2)
    s.settle()
    s.save("03-first-run-preset", window, "first run, step 3: Light, Balanced or Maximum")
    first.next_button.click()
    s.wait(lambda: window.root.currentWidget() is window.main)
    s.settle(0.8)
    s.save(
        "04-dashboard-after-first-run", window, "dashboard after first run: paused until opted in"
    )
    window.hide()


def _join_by_url(s: Shooter) -> None:
    fresh = FakeEngine("fresh")
    window = s.window(fresh)
    first = window.first_run
    s.wait(lambda: first.offer_list.count() > 0)
    first.url_field.edit.setText("albert.example.org")
    first.url_field.look_up()
    s.settle()
    s.save("01b-first-run-url-problem", window, "first run: a project URL without https://")
    first.url_field.edit.setText(f"{REMOTE_PREVIEW.url}/")
    first.url_field.look_up()
    s.wait(lambda: first.previewing() is not None)
    s.settle()
    s.save("01c-first-run-preview", window, "first run: a project looked up by its URL")
    first.trust_box.click()  # the link names no key: trusted by hand
    first.next_button.click()  # Join
    s.wait(lambda: first.steps.currentIndex() == 1)
    first.next_button.click()  # skip the account
    s.wait(lambda: first.steps.currentIndex() == 2)
    first.next_button.click()  # Finish
    s.wait(lambda: window.root.currentWidget() is window.main)
    fresh.update_manifest(
        REMOTE_PREVIEW.name, 4, refused="it changes the model's shape (hidden size 1024 to 2048)"
    )
    s.wait(lambda: not window.page["dashboard"].update_refused.isHidden())  # type: ignore[attr-defined]
    s.settle(0.8)
    s.save("04b-dashboard-update-refused", window, "dashboard: a manifest update was refused")
    window.hide()


def _add_project(s: Shooter) -> None:
    window = s.window(FakeEngine("contributing"))
    s.wait(lambda: window.root.currentWidget() is window.main)
    window.add_project_action.trigger()
    first = window.first_run
    first.url_field.edit.setText(REMOTE_PREVIEW.url)
    first.url_field.look_up()
    s.wait(lambda: first.previewing() is not None)
    s.settle()
    s.save("01d-add-project", window, "File > Add project…: a second project looked up by its URL")
    window.hide()


def _main_pages(s: Shooter) -> None:
    fake = FakeEngine("contributing")
    window = s.window(fake)
    pages = (
        ("dashboard", "05-dashboard", "dashboard: contributing, tiles, the loss curve"),
        ("schedule", "06-schedule", "schedule: every preference with its explanation"),
        ("statistics", "07-statistics", "statistics: samples, compute hours and data per day"),
        ("leaderboard", "08-leaderboard", "leaderboard: rank, percentile, neighbours, top 10"),
        ("events", "09-events", "events: the engine's recent events, copy diagnostics"),
        ("projects", "09b-projects", "projects: each attached project, switch to it or leave it"),
    )
    for key, name, what in pages:
        window.show_page(key)
        s.settle(0.8)
        s.save(name, window, what)
    window.show_page("dashboard")
    fake.set_conditions(idle_seconds=20.0)  # at the computer: a GPU project waits
    s.settle(0.6)
    s.save("10-dashboard-waiting", window, "dashboard: waiting while the user is at the computer")
    fake.set_conditions(on_battery=True)
    s.settle(0.6)
    s.save("11-dashboard-on-battery", window, "dashboard: paused on battery")
    fake.set_conditions()
    fake.emit(ErrorRaised("project barnraise-demo", "averaging round 150 lost 1 of 5 parts"))
    s.settle(0.6)
    s.save("12-dashboard-engine-warning", window, "a warning from the engine in the banner")
    fake.shut_down = True
    fake.end_streams()
    s.wait(lambda: window.store.connection[0] == "stopped")
    s.settle(0.4)
    s.save("13-engine-stopped", window, "the engine was stopped: the banner offers to start it")
    window.hide()


def _statistics_model(s: Shooter) -> None:
    """The statistics page scrolled down to the model: the held-out curve and its floor, then
    "Try the model" under it, answering a sentence with a missing word."""
    window = s.window(FakeEngine("contributing"))
    window.show_page("statistics")
    page = window.page["statistics"]
    assert isinstance(page, StatisticsPage)
    s.wait(lambda: bool(page.loss_chart.levels))  # the sample evaluations carry the floor
    scroll = page.findChild(QScrollArea)
    assert scroll is not None
    body = scroll.widget()
    bar = scroll.verticalScrollBar()
    assert body is not None
    assert bar is not None
    s.settle(0.8)  # laid out first: the chart's place in the scrolled body is known only then
    top = page.loss_chart.mapTo(body, QPoint(0, 0)).y()
    bar.setValue(top - 8)
    s.settle(0.4)
    s.save(
        "07b-statistics-model",
        window,
        "statistics: training and held-out loss, the unigram floor's line, the held-out tile",
    )
    box = page.try_model
    box.question.setText(TRY_SENTENCE)
    box.ask_button.click()
    s.wait(lambda: box.answer is not None and not box.asking)
    s.settle(0.6)  # the answer's lines lengthen the body: laid out again before scrolling
    _scroll_to_show(bar, top - 8, box.mapTo(body, QPoint(0, box.height())).y() + 8)
    s.settle(0.4)
    s.save(
        "07c-try-the-model",
        window,
        "statistics: the held-out curve with its floor, and the model's guesses for a missing word",
    )
    window.hide()


def _scroll_to_show(bar: QScrollBar, top: int, bottom: int) -> None:
    """Scroll so that the body from ``top`` to ``bottom`` is in view, or as much of its top as
    fits with its bottom (the answer) in view."""
    view = bar.pageStep()  # the viewport's height
    bar.setValue(max(top, bottom - view) if bottom - top > view else top)


def _leaderboard_states(s: Shooter) -> None:
    fake = FakeEngine("contributing")
    window = s.window(fake)
    window.show_page("leaderboard")
    s.settle(0.8)
    fake.coordinator.down = True
    window.store.refresh_leaderboard()
    s.settle(0.8)
    s.save("14-leaderboard-stale", window, "leaderboard: coordinator down, data marked as stale")
    window.hide()
    logged_out = FakeEngine("contributing")
    logged_out.username = None
    window = s.window(logged_out)
    window.show_page("leaderboard")
    s.settle(0.8)
    s.save("15-leaderboard-login", window, "leaderboard: not logged in, the login form")
    window.hide()


def _tray_and_dialogs(s: Shooter) -> None:
    fake = FakeEngine("contributing")
    window = s.window(fake)
    tray = Tray(
        window.store, show_window=lambda: None, toggle_window=lambda: None, quit_app=lambda: None
    )
    s.settle(0.3)
    tray.menu.adjustSize()
    s.save("16-tray-menu", tray.menu.grab(), "the tray menu: state, pause, snooze, open, quit")
    strip = QPixmap(4 * 72, 64)
    strip.fill()
    from PySide6.QtGui import QPainter

    painter = QPainter(strip)
    for i, look in enumerate(("contributing", "waiting", "paused", "error")):
        painter.drawPixmap(i * 72 + 4, 0, tray_icon(look).pixmap(64, 64))  # type: ignore[arg-type]
    painter.end()
    s.save("17-tray-icons", strip, "tray icon looks: contributing, waiting, paused, error")
    box = CloseQuestion.build(window, tray=True).box
    box.show()
    s.settle(0.3)
    s.save("18-close-question", box, "closing the window: asked once")
    box.hide()
    window.hide()


GROUPS: tuple[tuple[Callable[[Shooter], None], tuple[str, ...]], ...] = (
    (
        _first_run,
        (
            "01-first-run-project",
            "02-first-run-account",
            "03-first-run-preset",
            "04-dashboard-after-first-run",
        ),
    ),
    (
        _join_by_url,
        ("01b-first-run-url-problem", "01c-first-run-preview", "04b-dashboard-update-refused"),
    ),
    (_add_project, ("01d-add-project",)),
    (
        _main_pages,
        (
            "05-dashboard",
            "06-schedule",
            "07-statistics",
            "08-leaderboard",
            "09-events",
            "09b-projects",
            "10-dashboard-waiting",
            "11-dashboard-on-battery",
            "12-dashboard-engine-warning",
            "13-engine-stopped",
        ),
    ),
    (_statistics_model, ("07b-statistics-model", "07c-try-the-model")),
    (_leaderboard_states, ("14-leaderboard-stale", "15-leaderboard-login")),
    (_tray_and_dialogs, ("16-tray-menu", "17-tray-icons", "18-close-question")),
)
"""Each group of shots (one window on its own fake engine) and the shots it saves, in order."""

PAGES = (
    ("project-page", "/", 1100, 900, False, "the project page at a desktop's width"),
    ("project-page-phone", "/", 360, 740, True, "the project page on a phone (360 px)"),
    ("project-user-page", "/u/arnab", 1100, 900, False, "a volunteer's page"),
)


def project_pages(out: Path, only: Sequence[str] = ()) -> tuple[list[dict[str, object]], list[str]]:
    """The coordinator's pages in headless Chromium: (files saved, notes on what was skipped);
    with ``only``, just the pages whose name contains one of its parts."""
    pages = [p for p in PAGES if not only or any(part in p[0] for part in only)]
    if not pages:
        return [], []
    missing = chromium_missing()
    if missing is not None:
        note = f"project page screenshots skipped: {missing}"
        print(f"note: {note}", flush=True)
        return [], [note]
    saved: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as folder, LiveCoordinator(Path(folder)) as live:
        sample_project(live)
        for name, path, width, height, phone, what in pages:
            with chromium(width, height, phone=phone) as driver:
                driver.get(live.url + path)
                png = full_page_png(driver, width, phone=phone)
            (out / f"{name}.png").write_bytes(png)
            size = (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big"))
            saved.append(
                {"file": f"{name}.png", "shows": what, "width": size[0], "height": size[1]}
            )
            print(f"{name + '.png':32} {what}", flush=True)
    return saved, []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--width", type=int, default=1100)
    parser.add_argument("--height", type=int, default=760)
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="take only the shots whose file name contains NAME (repeatable; default: all)",
    )
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    qapp = QApplication(sys.argv[:1])
    apply_theme(qapp)
    QTimer.singleShot(0, lambda: None)
    saved = shoot(args.outdir, (args.width, args.height), args.only)
    (args.outdir / ".screenshots-app.ini").unlink(missing_ok=True)
    pages, notes = project_pages(args.outdir, args.only)
    saved += pages
    index = {
        "benchmark": "screenshots",
        "platform": qapp.platformName(),
        "files": saved,
        "notes": notes,
    }
    (args.outdir / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    print(f"{len(saved)} screenshots in {args.outdir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
