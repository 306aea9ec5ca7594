"""The app's icon from its files, the tray's four looks on it, and the first-run torch dialog.

The dialog runs a stand-in for ``barnraise torch install --json``: a Python one-liner printing the
progress lines a real fetch prints (downloading, then done; or an unreachable index).
"""

from __future__ import annotations

import sys
from typing import get_args

from PySide6.QtGui import QImage
from pytestqt.qtbot import QtBot

from app.icons import APP_SIZES, TRAY_SIZES, Look, app_icon, icon_file, tray_icon
from app.torch_fetch import TorchFetchDialog
from core.api.torch_fetch import FetchProgress


def test_the_app_icon_comes_from_the_files_at_every_size(qtbot: QtBot) -> None:
    assert all(icon_file(size).is_file() for size in APP_SIZES)
    icon = app_icon()
    assert sorted(s.width() for s in icon.availableSizes()) == sorted(APP_SIZES)


def test_the_tray_looks_differ_and_keep_the_barn(qtbot: QtBot) -> None:
    looks = get_args(Look)
    images = {look: tray_icon(look).pixmap(32, 32).toImage() for look in looks}
    sizes = [s.width() for s in tray_icon("paused").availableSizes()]
    assert all(size in sizes for size in TRAY_SIZES)
    assert len({bytes(image.constBits()) for image in images.values()}) == len(looks)
    barn = QImage(str(icon_file(32))).convertToFormat(images["paused"].format())
    for image in images.values():  # the top left (the roof) is the barn's, the badge is below right
        assert image.pixel(8, 8) == barn.pixel(8, 8)


def script(*progress: FetchProgress, code: int = 0) -> list[str]:
    lines = "".join(f"print({p.to_json()!r}, flush=True);" for p in progress)
    return [sys.executable, "-c", f"{lines}print('a stray line');raise SystemExit({code})"]


def test_the_dialog_follows_a_download_to_the_end(qtbot: QtBot) -> None:
    command = script(
        FetchProgress("checking", "torch==2.13.0+cpu: no NVIDIA GPU", "torch"),
        FetchProgress("downloading", "Downloading torch", "torch", 50, 200_000_000),
        FetchProgress("done", "torch==2.13.0+cpu is ready"),
    )
    dialog = TorchFetchDialog(command=command)
    qtbot.addWidget(dialog)
    with qtbot.waitSignal(dialog.ready, timeout=20_000):
        dialog.show()
    assert dialog.status.text() == "torch==2.13.0+cpu is ready"
    assert dialog.bar.format() == "Ready"
    assert dialog.later.text() == "Close"
    assert not dialog.retry.isVisible()


def test_offline_says_so_and_offers_to_try_again(qtbot: QtBot) -> None:
    offline = FetchProgress(
        "failed",
        "Could not reach download.pytorch.org: this computer seems to be offline.",
        offline=True,
    )
    dialog = TorchFetchDialog(command=script(offline, code=3))
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(dialog.retry.isVisible, timeout=20_000)
    assert dialog.heading.text() == "You seem to be offline"
    assert "Could not reach download.pytorch.org" in dialog.status.text()
    assert "Try again" in dialog.status.text()
    assert dialog.status.objectName() == "inlineError"
    assert not dialog.bar.isVisible()


def test_a_fetch_that_dies_without_a_word_is_a_failure(qtbot: QtBot) -> None:
    dialog = TorchFetchDialog(command=[sys.executable, "-c", "raise SystemExit(9)"])
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(dialog.retry.isVisible, timeout=20_000)
    assert dialog.heading.text() == "PyTorch could not be fetched"
    assert "status 9" in dialog.status.text()
