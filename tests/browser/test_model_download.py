"""The published model and the held-out figures on the project page, in a real browser: Debian's
headless Chromium, driven by selenium, against a coordinator running on this machine that reads
the model's signed index from a web server on this machine. The page offers the download (link,
size, epoch, held-out loss, SHA-256, the lines that load it), shows the held-out figures and curve
(with the unigram floor's line and words) only once there is an evaluation, updates them in place,
fits a phone's 360 px, and breaks none of its own Content-Security-Policy.

Skipped, with the reason, where Chromium, its driver or selenium is missing (``.ci/run`` installs
them on Debian as root)."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from benchmarks.app.page_browser import PROJECT, LiveCoordinator, chromium, chromium_missing
from core.training.publish.model import publish_model
from core.trust.published_model import HeldOut, ModelIndex
from tests.browser.test_project_page import policy_violations

MISSING = chromium_missing()
pytestmark = [pytest.mark.skipif(MISSING is not None, reason=f"no headless Chromium: {MISSING}")]

WAIT = 15.0


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass  # the test's output is for its failures


@pytest.fixture
def published(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A web server on this machine serving the published folder: (its URL, the folder)."""
    folder = tmp_path / "published"
    folder.mkdir()
    handler = functools.partial(_Quiet, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="published-files", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", folder
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def live(
    tmp_path: Path, published: tuple[str, Path]
) -> Iterator[tuple[LiveCoordinator, ModelIndex]]:
    url, folder = published
    coordinator = LiveCoordinator(tmp_path, checkpoint_url=url)
    exported = tmp_path / "export"
    exported.mkdir()
    (exported / "config.json").write_text(json.dumps({"architectures": ["AlbertForMaskedLM"]}))
    (exported / "model.safetensors").write_bytes(bytes(range(256)) * 5000)
    index = publish_model(
        exported,
        folder,
        coordinator.key,
        project=PROJECT,
        epoch=3,
        architecture="AlbertForMaskedLM",
        held_out=HeldOut(2, 4.625, 0.3125, 256),
    )
    with coordinator:
        for epoch, loss in enumerate((6.0, 5.1, 4.4, 3.9)):
            coordinator.report(epoch, loss, speed=512.5, alive=4, samples=1000)
        yield coordinator, index


def test_the_page_offers_the_model_and_shows_held_out_figures_as_they_come(
    live: tuple[LiveCoordinator, ModelIndex],
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    coordinator, index = live
    with chromium(1100, 900) as driver:
        driver.get(coordinator.url + "/?poll=0.3")

        def figure(name: str) -> str:
            return str(driver.find_element(By.CSS_SELECTOR, f'[data-figure="{name}"]').text)

        section = driver.find_element(By.ID, "download")
        assert section.is_displayed()
        link = driver.find_element(By.ID, "model-link")
        assert link.get_attribute("href") == f"{coordinator.checkpoint_url}/model-00000003.zip"
        assert link.text == "model-00000003.zip"
        assert figure("model_size") == f"{index.size / 1e6:.1f} MB"
        assert figure("model_epoch") == "3"
        assert figure("model_held_out").startswith("4.625 (accuracy 31.2%, measured at epoch 2")
        assert figure("model_sha256") == index.sha256
        code = driver.find_element(By.CSS_SELECTOR, "pre.load").text
        assert code.splitlines() == [
            "from transformers import AutoModelForMaskedLM, AutoTokenizer",
            'tokenizer = AutoTokenizer.from_pretrained("model-00000003")',
            'model = AutoModelForMaskedLM.from_pretrained("model-00000003")',
        ]

        # no evaluation yet: nothing of them shows
        assert not driver.find_element(By.ID, "held-out").is_displayed()
        assert not driver.find_element(By.ID, "curve-legend").is_displayed()
        held_out = driver.find_element(By.ID, "held-out-path")
        assert held_out.get_attribute("data-points") == "0"
        assert driver.find_element(By.ID, "floor-path").get_attribute("d") == ""
        driver.execute_script("window.notReloaded = true")

        coordinator.evaluate(1, 5.25, accuracy=0.125, samples=128, floor=6.5)
        coordinator.evaluate(3, 4.25, accuracy=0.25, samples=256, floor=6.5)
        WebDriverWait(driver, WAIT).until(
            lambda d: d.find_element(By.ID, "held-out-path").get_attribute("data-points") == "2"
        )
        assert driver.execute_script("return window.notReloaded") is True
        assert driver.find_element(By.ID, "held-out").is_displayed()
        assert driver.find_element(By.ID, "curve-legend").is_displayed()
        assert figure("held_out_loss") == "4.25"
        assert figure("held_out_accuracy") == "25.0%"
        assert figure("held_out_when") == "at epoch 3, on 256 held-out sequences"
        # the unigram floor: words beside the loss, and a level line across the plot at the top
        # of its scale (above the first training loss, 6.0)
        assert driver.find_element(By.ID, "held-out-floor").is_displayed()
        assert figure("held_out_floor").startswith("2.25 below the unigram floor (6.50)")
        assert driver.find_element(By.ID, "floor-key").is_displayed()
        floor = driver.find_element(By.ID, "floor-path")
        assert floor.get_attribute("d") == "M0 8.0 H600"
        assert floor.rect["width"] > 300
        assert figure("curve_top") == "6.5"
        path = driver.find_element(By.ID, "held-out-path")
        assert str(path.get_attribute("d")).count("L") == 1
        assert path.rect["width"] > 100  # epochs 1 to 3 of 0 to 3
        dots = str(driver.find_element(By.ID, "held-out-dots").get_attribute("d"))
        assert dots.count("M") == 2
        # the training curve is on the same scale, still whole
        assert driver.find_element(By.ID, "loss-path").get_attribute("data-points") == "4"
        assert not policy_violations(driver)


def test_a_phone_wide_page_with_the_download_does_not_scroll_sideways(
    live: tuple[LiveCoordinator, ModelIndex],
) -> None:
    from selenium.webdriver.common.by import By

    coordinator, _ = live
    coordinator.evaluate(3, 4.25)
    with chromium(360, 740, phone=True) as driver:
        driver.get(coordinator.url + "/")
        assert driver.find_element(By.ID, "download").is_displayed()
        assert driver.find_element(By.ID, "held-out").is_displayed()
        width = driver.execute_script("return window.innerWidth")
        scroll = driver.execute_script("return document.documentElement.scrollWidth")
        assert scroll <= width, f"the page is {scroll} px wide in a {width} px window"
        assert not policy_violations(driver)
