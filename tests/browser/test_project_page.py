"""The project page in a real browser: Debian's headless Chromium, driven by selenium, against a
coordinator running on this machine. The page shows the live figures and the loss curve, updates
them without a reload when a report arrives, fits a phone's 360 px, keeps a hostile description as
text, and breaks none of its own Content-Security-Policy.

Skipped, with the reason, where Chromium, its driver or selenium is missing (``.ci/run`` installs
them on Debian as root)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.app.page_browser import LiveCoordinator, chromium, chromium_missing

MISSING = chromium_missing()
pytestmark = [pytest.mark.skipif(MISSING is not None, reason=f"no headless Chromium: {MISSING}")]

HOSTILE = (
    'A test project. <script>document.title = "pwned"</script>'
    "<img src=x onerror=\"document.title = 'pwned'\"> & friends"
)
WAIT = 15.0


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveCoordinator]:
    with LiveCoordinator(tmp_path, HOSTILE) as coordinator:
        for epoch, loss in enumerate((6.0, 5.1, 4.4)):
            coordinator.report(epoch, loss, speed=512.5, alive=4, samples=1000)
        yield coordinator


def test_the_page_shows_the_live_figures_and_updates_them_in_place(live: LiveCoordinator) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with chromium(1100, 900) as driver:
        driver.get(live.url + "/?poll=0.3")
        path = driver.find_element(By.ID, "loss-path")
        assert path.get_attribute("data-points") == "3"
        assert path.get_attribute("d").count("L") == 2
        box = path.rect
        assert box["width"] > 300
        assert box["height"] > 50

        def figure(name: str) -> str:
            return str(driver.find_element(By.CSS_SELECTOR, f'[data-figure="{name}"]').text)

        assert figure("volunteers_online") == "4"
        assert figure("samples_per_second") == "512.5"
        assert figure("epoch") == "2"
        assert figure("samples") == "3,000"
        copy = driver.find_element(By.ID, "copy-url")
        assert copy.is_displayed()  # the script ran and offers it
        copy.click()
        WebDriverWait(driver, WAIT).until(lambda d: d.find_element(By.ID, "copy-done").text)
        # the description is text: its script did not run, its image was not made
        assert driver.title != "pwned"
        intro = driver.find_element(By.CSS_SELECTOR, ".intro").text
        assert '<script>document.title = "pwned"</script>' in intro
        assert not driver.find_elements(By.CSS_SELECTOR, "main img")
        driver.execute_script("window.notReloaded = true")

        live.report(3, 3.9, speed=640.0, alive=5, samples=1000)
        WebDriverWait(driver, WAIT).until(
            lambda d: d.find_element(By.ID, "loss-path").get_attribute("data-points") == "4"
        )
        assert driver.execute_script("return window.notReloaded") is True
        path = driver.find_element(By.ID, "loss-path")
        assert path.get_attribute("d").count("L") == 3
        assert figure("epoch") == "3"
        assert figure("volunteers_online") == "5"
        assert figure("samples_per_second") == "640.0"
        assert figure("curve_bottom") == "3.9"
        assert driver.title != "pwned"
        assert not policy_violations(driver)


def test_a_phone_wide_page_does_not_scroll_sideways(live: LiveCoordinator) -> None:
    from selenium.webdriver.common.by import By

    with chromium(360, 740, phone=True) as driver:
        driver.get(live.url + "/")
        width = driver.execute_script("return window.innerWidth")
        assert width == 360
        scroll = driver.execute_script("return document.documentElement.scrollWidth")
        assert scroll <= width, f"the page is {scroll} px wide in a {width} px window"
        curve = driver.find_element(By.ID, "loss-path").rect
        assert 200 < curve["width"] <= 360
        # the text is readable: no font below 12 px
        smallest = driver.execute_script(
            "return Math.min(...Array.from(document.querySelectorAll('body *'))"
            ".filter(e => e.textContent.trim() && e.getClientRects().length)"
            ".map(e => parseFloat(getComputedStyle(e).fontSize)))"
        )
        assert smallest >= 12
        assert not policy_violations(driver)


def policy_violations(driver: object) -> list[str]:
    """Console messages about the Content-Security-Policy (anything of ours it blocked)."""
    entries = driver.get_log("browser")  # type: ignore[attr-defined]
    return [e["message"] for e in entries if "Content Security Policy" in e["message"]]
