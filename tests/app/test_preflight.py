"""Before Qt starts: a display Qt cannot use is reported in one sentence naming what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.preflight import display_problem, uses_xcb


@pytest.mark.parametrize(
    ("environ", "platform", "expected"),
    [
        ({"DISPLAY": ":0"}, "linux", True),
        ({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}, "linux", False),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, "linux", False),
        ({"QT_QPA_PLATFORM": "xcb"}, "linux", True),
        ({"DISPLAY": ":0"}, "darwin", False),
        ({"DISPLAY": ":0"}, "win32", False),
        ({}, "linux", False),
    ],
)
def test_when_qt_uses_its_x11_plugin(
    environ: dict[str, str], platform: str, expected: bool
) -> None:
    assert uses_xcb(environ, platform) is expected


def test_a_plugin_that_cannot_load_is_named_with_the_packages(tmp_path: Path) -> None:
    broken = tmp_path / "libqxcb.so"
    broken.write_bytes(b"not a shared object")
    problem = display_problem({"DISPLAY": ":7"}, plugin=broken)
    assert problem is not None
    assert "cannot use the X11 display :7" in problem
    assert "libqxcb.so" in problem
    assert "sudo apt install libxcb-cursor0" in problem


def test_offscreen_needs_nothing() -> None:
    assert display_problem({"QT_QPA_PLATFORM": "offscreen", "DISPLAY": ":7"}) is None
