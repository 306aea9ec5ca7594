"""The single-instance socket: a second launch is told to show the first, and a killed app's socket
does not outlive it once ``remove_stale`` (or the next launch) has run."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from PySide6.QtCore import QDir
from pytestqt.qtbot import QtBot

from app.instance import SingleInstance, remove_stale, socket_name

HOLDER = """
import sys
from PySide6.QtCore import QCoreApplication
from app.instance import SingleInstance
app = QCoreApplication([])
instance = SingleInstance(sys.argv[1])
print("claimed" if instance.claim() else "refused", flush=True)
sys.stdin.read()
"""


def socket_file(key: str) -> Path:
    return Path(QDir.tempPath()) / socket_name(key)


def test_a_second_launch_asks_the_first_to_show_itself(qtbot: QtBot, tmp_path: Path) -> None:
    key = str(tmp_path / "endpoint.json")
    first = SingleInstance(key)
    try:
        assert first.claim()
        with qtbot.waitSignal(first.activated, timeout=5000):
            assert not SingleInstance(key).claim()
    finally:
        first.release()
    qtbot.wait(50)
    assert not socket_file(key).exists()


def test_a_killed_apps_socket_is_removed(tmp_path: Path) -> None:
    key = str(tmp_path / "endpoint.json")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, key],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "claimed"
        assert socket_file(key).exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    try:
        assert socket_file(key).exists(), "a killed app leaves its socket behind"
    finally:
        remove_stale(key)
    assert not socket_file(key).exists()
