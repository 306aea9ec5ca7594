"""Headless Chromium, as the browser tests and benchmarks start it, leaves nothing behind in the
temporary folder: its profile and its single-instance socket go with it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from benchmarks.app.page_browser import chromium, chromium_missing

MISSING = chromium_missing()
pytestmark = [pytest.mark.skipif(MISSING is not None, reason=f"no headless Chromium: {MISSING}")]


def chromium_leftovers() -> set[str]:
    """Chromium's own folders in the temporary folder (no other program names its folders so)."""
    return {p.name for p in Path(tempfile.gettempdir()).iterdir() if "org.chromium." in p.name}


def test_a_closed_chromium_leaves_nothing_in_the_temporary_folder() -> None:
    before = chromium_leftovers()
    with chromium(400, 300) as driver:
        driver.get("about:blank")
        assert driver.execute_script("return 1 + 1") == 2
    assert chromium_leftovers() - before == set()
