"""End to end: the real window, the real engine (started by the app's own supervisor) and a real
local demo swarm. First run offers the running swarm and joins it; the dashboard's switch turns
contribution on — samples are counted in the ledger and shown — and off — they stop.

The swarm is a backbone only (``barnraise swarm --peers 0``: a backbone and the shard
server), so the engine's peer is the collaboration's one trainer. The Maximum preset is chosen so
that the test's own CPU use never counts as "other programs are busy". Once the peer has trained,
the statistics page's "Try the model" asks the engine's model, paused.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.pages.dashboard import DashboardPage
from app.pages.statistics import StatisticsPage
from app.window import MainWindow
from core.config.paths import UserDirs
from core.swarm import running_swarms
from tests.app.real_engine import real_window

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.name == "nt", reason="sends SIGINT")]
ROOT = Path(__file__).resolve().parents[2]
CLICK = Qt.MouseButton.LeftButton


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("BARNRAISE_HOME", str(home))
    monkeypatch.setenv("BARNRAISE_SWARM_LOG_LEVEL", "warning")
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    return home


@pytest.fixture
def swarm(
    home: Path, tmp_path: Path, qtbot: QtBot, demo_data: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """A backbone on loopback that announces itself in ``home``; stopped with Ctrl-C."""
    work = tmp_path / "swarm"
    work.mkdir(parents=True)
    (work / "data").symlink_to(demo_data, target_is_directory=True)  # made already: kept
    proc = subprocess.Popen(
        [sys.executable, "-m", "core.cli.main", "swarm", "--peers", "0", "--work-dir", str(work)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        qtbot.waitUntil(lambda: bool(running_swarms(UserDirs.under(home))), timeout=120_000)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def window(
    home: Path, swarm: subprocess.Popen[bytes], qtbot: QtBot, tmp_path: Path
) -> Iterator[MainWindow]:
    try:
        with real_window(qtbot, tmp_path / "app.ini", statistics_every_ms=2000) as window:
            yield window
    finally:
        shutil.rmtree(home / "cache" / "swarm", ignore_errors=True)


def test_first_run_then_the_switch_starts_and_stops_the_counting(
    window: MainWindow, qtbot: QtBot
) -> None:
    store, first = window.store, window.first_run
    # the app started the engine, which found the running swarm
    qtbot.waitUntil(lambda: window.root.currentWidget() is first, timeout=120_000)
    qtbot.waitUntil(lambda: first.selected_offer() is not None, timeout=60_000)
    offer = first.selected_offer()
    assert offer is not None
    assert offer.source == "local_swarm"
    assert "on this computer" in offer.note
    qtbot.mouseClick(first.next_button, CLICK)
    # an open demo has no coordinator: straight from the project to the preset
    qtbot.waitUntil(lambda: first.steps.currentIndex() == 2, timeout=60_000)
    first.preset_buttons["maximum"].click()
    qtbot.mouseClick(first.next_button, CLICK)
    qtbot.waitUntil(lambda: window.root.currentWidget() is window.main, timeout=60_000)

    page = window.page["dashboard"]
    assert isinstance(page, DashboardPage)
    assert store.state is not None
    assert not page.switch.isChecked()
    assert store.state.code == "not_opted_in"

    qtbot.mouseClick(page.switch, CLICK)  # contribute: on
    qtbot.waitUntil(
        lambda: store.state is not None and store.state.progress.session_samples > 0,
        timeout=180_000,
    )
    assert page.state_word.text() in ("Contributing", "Contributing slowly")

    def counted() -> int:
        store.refresh_statistics()
        return store.statistics.today.samples if store.statistics is not None else 0

    qtbot.waitUntil(lambda: counted() > 0, timeout=60_000)
    qtbot.waitUntil(lambda: page.today.value.text() not in ("0", "–"), timeout=30_000)

    qtbot.mouseClick(page.switch, CLICK)  # contribute: off
    qtbot.waitUntil(lambda: page.state_word.text() == "Paused", timeout=30_000)
    assert store.state is not None
    assert store.state.code == "user_paused"
    qtbot.wait(3000)  # the meter's last deltas after the pause (it reads the peer every 2 s)
    before = counted()
    qtbot.wait(4000)  # a paused engine must count nothing more
    assert counted() == before
    qtbot.waitUntil(
        lambda: store.state is not None and store.state.progress.samples_per_second == 0
    )


def test_try_the_model_answers_from_the_engines_replica(window: MainWindow, qtbot: QtBot) -> None:
    """The statistics page's box asks the engine's real model: not here before the peer caught
    up with the swarm, then its guesses, from a paused engine too."""
    store, first = window.store, window.first_run
    qtbot.waitUntil(lambda: window.root.currentWidget() is first, timeout=120_000)
    qtbot.waitUntil(lambda: first.selected_offer() is not None, timeout=60_000)
    qtbot.mouseClick(first.next_button, CLICK)
    qtbot.waitUntil(lambda: first.steps.currentIndex() == 2, timeout=60_000)
    first.preset_buttons["maximum"].click()
    qtbot.mouseClick(first.next_button, CLICK)
    qtbot.waitUntil(lambda: window.root.currentWidget() is window.main, timeout=60_000)
    window.show_page("statistics")
    page = window.page["statistics"]
    assert isinstance(page, StatisticsPage)
    box = page.try_model

    def ask(text: str) -> str:
        box.question.setText(text)
        qtbot.mouseClick(box.ask_button, CLICK)
        qtbot.waitUntil(lambda: not box.asking, timeout=150_000)
        return box.result.text()

    assert ask("The ___ of the river.").startswith("The model is not here yet")
    store.set_contributing(True)
    # the trainer exists once it caught up with the swarm: its first samples say so
    qtbot.waitUntil(
        lambda: store.state is not None and store.state.progress.session_samples > 0,
        timeout=180_000,
    )
    store.set_contributing(False)
    qtbot.waitUntil(lambda: store.state is not None and store.state.code == "user_paused")
    shown = ask("The ___ of the river.")
    assert box.answer is not None, shown
    assert box.answer.answered, shown
    assert (box.answer.kind, len(box.answer.guesses)) == ("masked", 5)
    assert shown.startswith("Its guesses: ")
    assert box.answer.text.startswith(f"The {box.answer.guesses[0].word} of the river")
