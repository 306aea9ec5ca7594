"""What users expect of a desktop program around the edges, against a fake engine: start at login
(asked in the first run, on by default; the Settings menu reads the login item back), the app's
log and crash hooks, "Open logs folder" (window and tray), the About box; and the app reading an
engine's or the demo swarm's output that was rotated as it started.

The login item is the real XDG autostart entry under a temporary ``XDG_CONFIG_HOME``; the desktop's
file manager is stood in for."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QAction
from pytestqt.qtbot import QtBot

from app import logs
from app.about import about_text, training_device
from app.engine.demo import DemoSwarm
from app.engine.local import LocalEngines
from app.engine.supervisor import EngineStartFailed
from app.settings import AppSettings
from app.start_at_login import StartAtLogin
from app.tray import Tray
from app.window import MainWindow
from core.api.login_item import LoginItemError
from core.api.testing import FakeEngine
from core.util.process.logfiles import OUTPUT_MAX_BYTES
from core.util.process.login_item import XdgAutostart
from tests.app.conftest import MakeStore
from tests.app.test_first_run import ACCOUNT_STEP, PRESET_STEP, attach_the_demo, wizard
from tests.support.leaks import wait_until_blocking

COMMAND = ["/opt/barnraise/bin/barnraise", "app", "--hidden"]
CLICK = Qt.MouseButton.LeftButton


@pytest.fixture
def autostart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> XdgAutostart:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return XdgAutostart.default()


@pytest.fixture
def start_at_login(app_settings: AppSettings, autostart: XdgAutostart) -> StartAtLogin:
    return StartAtLogin(app_settings, autostart, command=lambda: list(COMMAND))


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[QUrl]:
    """The URLs the app asked the desktop to open (nothing is opened)."""
    urls: list[QUrl] = []

    def open_url(url: QUrl) -> bool:
        urls.append(url)
        return True

    monkeypatch.setattr(logs, "open_url", open_url)
    return urls


@pytest.fixture
def make_window_with(
    qtbot: QtBot, make_store: MakeStore, app_settings: AppSettings, start_at_login: StartAtLogin
) -> Callable[[FakeEngine], MainWindow]:
    def make(engine: FakeEngine) -> MainWindow:
        window = MainWindow(
            make_store(engine),
            app_settings,
            tray_available=True,
            can_start_demo=True,
            start_at_login=start_at_login,
        )
        window.ask_close = lambda *_: ("background", True)
        qtbot.addWidget(window)
        window.show()
        qtbot.waitExposed(window)
        return window

    return make


# ---- start at login ------------------------------------------------------------------------------


def test_the_setting_is_the_login_item_read_back(
    start_at_login: StartAtLogin, autostart: XdgAutostart, app_settings: AppSettings
) -> None:
    assert not app_settings.login_asked
    assert start_at_login.first_run_choice() is True  # never asked: on, as BOINC does
    assert not start_at_login.enabled()
    assert start_at_login.choose(True) is None
    assert app_settings.login_asked
    assert autostart.read() == COMMAND
    assert start_at_login.enabled()
    assert start_at_login.choose(True) is None  # twice: the same
    assert start_at_login.choose(False) is None
    assert not Path(autostart.where).exists()
    assert start_at_login.first_run_choice() is False  # asked before: the truth, not the default


def test_without_an_installed_program_the_setting_says_why(
    app_settings: AppSettings, autostart: XdgAutostart
) -> None:
    def missing() -> list[str]:
        raise LoginItemError("this installation has no 'barnraise' program to start at login")

    setting = StartAtLogin(app_settings, autostart, command=missing)
    assert setting.unavailable() == "this installation has no 'barnraise' program to start at login"
    assert setting.first_run_choice() is False
    assert setting.choose(True) == setting.unavailable()
    assert autostart.read() is None


def finish_wizard(window: MainWindow, qtbot: QtBot, engine: FakeEngine, *, login: bool) -> None:
    page = wizard(window, qtbot)
    attach_the_demo(page, qtbot, ACCOUNT_STEP)
    qtbot.mouseClick(page.next_button, CLICK)  # skip the account
    qtbot.waitUntil(lambda: page.steps.currentIndex() == PRESET_STEP, timeout=10_000)
    assert page.login_box.isVisible()
    assert page.login_box.isChecked()  # on unless the user says otherwise
    page.login_box.setChecked(login)
    qtbot.mouseClick(page.next_button, CLICK)
    qtbot.waitUntil(lambda: window.root.currentWidget() is window.main, timeout=10_000)


def test_the_first_run_asks_once_on_by_default(
    make_window_with: Callable[[FakeEngine], MainWindow],
    fresh: FakeEngine,
    qtbot: QtBot,
    autostart: XdgAutostart,
    app_settings: AppSettings,
) -> None:
    window = make_window_with(fresh)
    finish_wizard(window, qtbot, fresh, login=True)
    assert autostart.read() == COMMAND
    assert app_settings.login_asked
    assert window.login_action.isChecked()  # the menu shows what is registered


def test_unticked_in_the_first_run_nothing_is_registered(
    make_window_with: Callable[[FakeEngine], MainWindow],
    fresh: FakeEngine,
    qtbot: QtBot,
    autostart: XdgAutostart,
    app_settings: AppSettings,
) -> None:
    window = make_window_with(fresh)
    finish_wizard(window, qtbot, fresh, login=False)
    assert not Path(autostart.where).exists()
    assert app_settings.login_asked
    assert not window.login_action.isChecked()


def test_the_settings_menu_turns_it_on_and_off_and_reads_it_back(
    make_window_with: Callable[[FakeEngine], MainWindow], fake: FakeEngine, autostart: XdgAutostart
) -> None:
    window = make_window_with(fake)
    action = window.login_action
    assert not action.isChecked()
    action.trigger()  # the user ticks it
    assert action.isChecked()
    assert autostart.read() == COMMAND
    autostart.remove()  # someone else removes it (barnraise uninstall, the desktop's settings)
    settings_menu = window.login_action.associatedObjects()[-1]
    settings_menu.aboutToShow.emit()  # the user opens the Settings menu
    assert not action.isChecked()
    action.trigger()
    action.trigger()  # and off again
    assert not action.isChecked()
    assert not Path(autostart.where).exists()


def test_the_window_without_the_setting_offers_none(
    make_window: Callable[..., MainWindow], fake: FakeEngine
) -> None:
    window = make_window(fake)
    assert not hasattr(window, "login_action")
    assert not window.first_run.login_box.isVisibleTo(window.first_run)


# ---- logs and crashes --------------------------------------------------------------------------


@pytest.fixture
def app_log(tmp_path: Path) -> Iterator[logs.AppLog]:
    log = logs.AppLog(tmp_path / "logs" / "app.log", tmp_path / "logs" / "app-crash.log")
    log.start()
    try:
        yield log
    finally:
        log.stop()


def test_the_app_log_records_warnings_and_uncaught_exceptions(app_log: logs.AppLog) -> None:
    logging.getLogger("app.test").warning("something the user may want to know")
    try:
        raise RuntimeError("a slot broke")
    except RuntimeError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    text = app_log.log_file.read_text()
    assert "WARNING app.test: something the user may want to know" in text
    assert "CRITICAL crash: uncaught exception" in text
    assert "RuntimeError: a slot broke" in text
    assert app_log.crash_file.exists()


def test_open_logs_folder_opens_the_log_folder(
    make_window: Callable[..., MainWindow],
    fake: FakeEngine,
    opened: list[QUrl],
    barnraise_home: Path,
) -> None:
    window = make_window(fake)
    (action,) = [a for a in window.findChildren(QAction) if "logs folder" in a.text()]
    action.trigger()
    (url,) = opened
    assert Path(url.toLocalFile()) == barnraise_home / "logs"
    assert (barnraise_home / "logs").is_dir()


def test_without_a_file_manager_the_banner_names_the_folder(
    make_window: Callable[..., MainWindow],
    fake: FakeEngine,
    monkeypatch: pytest.MonkeyPatch,
    barnraise_home: Path,
) -> None:
    monkeypatch.setattr(logs, "open_url", lambda url: False)
    window = make_window(fake)
    window.open_logs()
    assert window.banner.isVisible()
    assert str(barnraise_home / "logs") in window.banner.text.text()


def test_the_tray_offers_the_logs_folder(make_store: MakeStore, fake: FakeEngine) -> None:
    calls: list[str] = []
    tray = Tray(
        make_store(fake),
        show_window=lambda: None,
        toggle_window=lambda: None,
        quit_app=lambda: None,
        open_logs=lambda: calls.append("logs"),
    )
    assert tray.logs_action in tray.menu.actions()
    tray.logs_action.trigger()
    assert calls == ["logs"]


# ---- about ------------------------------------------------------------------------------------


def test_the_about_box_names_version_folders_and_device(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot, barnraise_home: Path
) -> None:
    window = make_window(fake)
    window.show_about()
    about = window.about
    assert about is not None
    qtbot.waitUntil(lambda: "Engine 0.1.0" in about.text(), timeout=10_000)
    text = about.text()
    assert text.startswith("Version ")
    assert f"Trains on: {training_device(window.store)}\n" in text
    assert f"Logs: {barnraise_home / 'logs'}" in text
    assert f"Data: {barnraise_home / 'data'}" in text
    about.box.close()


def test_about_text_without_an_engine() -> None:
    text = about_text(
        version="1.2.3",
        folders={"Logs": Path("/home/ada/.local/state/barnraise/log")},
        device="nothing yet (no project is active)",
        engine_note="not connected",
    )
    assert text.splitlines()[0].startswith("Version 1.2.3 (Python ")
    assert "Trains on: nothing yet (no project is active)" in text
    assert "Logs: /home/ada/.local/state/barnraise/log" in text
    assert text.endswith("Engine: not connected")


def test_the_device_hook_quotes_the_engine_or_else_the_project() -> None:
    nothing = SimpleNamespace(state=SimpleNamespace(project=None, device=None), projects=[])
    assert training_device(nothing) == "nothing yet (no project is active)"  # type: ignore[arg-type]
    project = SimpleNamespace(device="cuda", name="barnraise-demo", active=True)
    older = SimpleNamespace(state=SimpleNamespace(project=project, device=None), projects=[project])
    assert training_device(older) == "cuda (for barnraise-demo)"  # type: ignore[arg-type]
    found = SimpleNamespace(name="NVIDIA GeForce RTX 3060 (12 GB)", reason="the best GPU here")
    newer = SimpleNamespace(state=SimpleNamespace(project=project, device=found), projects=[])
    assert training_device(newer) == (  # type: ignore[arg-type]
        "NVIDIA GeForce RTX 3060 (12 GB) (the best GPU here)"
    )


# ---- the children's outputs, rotated as they start -----------------------------------------------


async def test_an_engine_that_fails_at_once_is_quoted_after_its_output_was_rotated(
    tmp_path: Path,
) -> None:
    output = tmp_path / "logs" / "engine-output.log"
    output.parent.mkdir()
    output.write_bytes(b"an old run\n" * (OUTPUT_MAX_BYTES // 11 + 1))
    engines = LocalEngines(
        command=(sys.executable, "-c", "print('cannot start: boom'); raise SystemExit(3)"),
        endpoint_file=tmp_path / "run" / "engine.json",
        output_file=output,
        start_timeout=30,
    )
    with pytest.raises(EngineStartFailed, match="status 3: cannot start: boom"):
        await engines.launch()
    assert output.with_name("engine-output.log.1").exists()


def test_a_demo_swarm_that_stops_is_quoted_after_its_output_was_rotated(tmp_path: Path) -> None:
    output = tmp_path / "demo-swarm.log"
    output.write_bytes(b"an old run\n" * (OUTPUT_MAX_BYTES // 11 + 1))
    demo = DemoSwarm(
        output, command=(sys.executable, "-c", "print('no data'); raise SystemExit(2)")
    )
    demo.start()
    wait_until_blocking(lambda: demo.failure() is not None)
    assert demo.failure() == "exit status 2: no data"
    demo.stop()
