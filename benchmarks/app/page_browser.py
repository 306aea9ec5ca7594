"""A coordinator with live figures, and headless Chromium to look at its project page.

Shared by the browser test (``tests/browser/test_project_page.py``) and the screenshots
(``benchmarks/app/screenshots.py``). ``LiveCoordinator`` runs a real ``CoordinatorService`` on a loopback
port, on a thread with its own event loop, and feeds it through the real client
(``CoordinatorClient``): epoch reports and held-out evaluations from a backbone's moderator
account, and volunteers' contributions under access passes their peer keys proved. ``chromium``
opens Debian's headless Chromium through its chromedriver (``/usr/bin/chromium``,
``/usr/bin/chromedriver``; selenium, a dev dependency); ``chromium_missing`` says why it cannot,
for a skip.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from core.account import CoordinatorClient, SessionTokens
from core.coordinator import CoordinatorService, ScryptParams
from core.project import parse_manifest
from core.trust.identity import Identity
from core.trust.passes import pass_to_text

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

T = TypeVar("T")

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
PROJECT = "sahaj-demo"
PASSWORD = "correct horse battery"
AUX = "backbone"
FAST = ScryptParams(n=2**10)
"""Accounts made for a page need no strong hash."""
DESCRIPTION = (
    "We pretrain a Bengali ALBERT together, the way sahajBERT was: volunteers lend their GPUs, "
    "the peers average their gradients over the internet, and the model is everyone's.\n\n"
    "Bengali has 230 million speakers and few open language models. A good one helps search, "
    "translation and accessibility tools."
)


def chromium_missing() -> str | None:
    """Why headless Chromium cannot run here, or None when it can."""
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[dev]')"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not path.exists() and shutil.which(path.name) is None:
            return f"{path} is missing (apt install {package})"
    return None


@contextmanager
def chromium(width: int, height: int, *, phone: bool = False) -> Iterator[Chrome]:
    """Headless Chromium showing ``width`` x ``height`` CSS pixels (a phone's viewport with
    ``phone``: the page's viewport meta applies, at twice the pixels), its console recorded."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium"))
    for argument in (
        "--headless=new",
        "--no-sandbox",  # as root in a container there is no sandbox to use
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
        "--lang=en-US",
        f"--window-size={width},{height}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver_path = CHROMEDRIVER if CHROMEDRIVER.exists() else shutil.which("chromedriver")
    # Chromium keeps its single-instance socket in a folder of its own under TMPDIR and leaves it
    # there when the driver ends it; a scratch TMPDIR and profile take everything with them
    with tempfile.TemporaryDirectory(prefix="barnraise-chromium-") as scratch:
        options.add_argument(f"--user-data-dir={Path(scratch) / 'profile'}")
        service = Service(str(driver_path), env=dict(os.environ, TMPDIR=scratch))
        driver = webdriver.Chrome(service=service, options=options)
        try:
            metrics = {
                "width": width,
                "height": height,
                "deviceScaleFactor": 2 if phone else 1,
                "mobile": phone,
            }
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
            yield driver
        finally:
            driver.quit()


def full_page_png(driver: Chrome, width: int, *, phone: bool = False) -> bytes:
    """A picture of the whole page, however long, at ``width`` CSS pixels."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    metrics = {"width": width, "height": height, "deviceScaleFactor": 2 if phone else 1}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {**metrics, "mobile": phone})
    png: bytes = driver.get_screenshot_as_png()
    return png


def manifest_text(key: Identity, description: str, url: str, checkpoint_url: str = "") -> str:
    quoted = description.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f"""
[project]
name = "{PROJECT}"
description = "{quoted}"

[model]
vocab_size = 32000
embedding_size = 128
hidden_size = 1024
num_layers = 24
num_heads = 16
intermediate_size = 4096
max_position = 128

[training]
target_batch_size = 4096

[data]
tokenizer_vocab_size = 32000

[[data.sources]]
urls = ["shards/a.jsonl"]

[network]
coordinator_url = "{url}"
checkpoint_url = "{checkpoint_url}"

[access]
mode = "moderated"
project_key = "{key.peer_id}"
allow_signup = true
"""


class LiveCoordinator:
    """A coordinator on its own thread and loop; every call waits for its answer."""

    def __init__(
        self, folder: Path, description: str = DESCRIPTION, *, checkpoint_url: str = ""
    ) -> None:
        """``checkpoint_url``: where the backbone publishes (the page offers its model)."""
        self.folder = folder
        self.description = description
        self.checkpoint_url = checkpoint_url
        self.key = Identity.generate()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="live-coordinator", daemon=True
        )
        self.service: CoordinatorService | None = None
        self._client: CoordinatorClient | None = None
        self._aux: SessionTokens | None = None

    @property
    def url(self) -> str:
        assert self.service is not None
        return self.service.url

    def call(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout=60)

    def __enter__(self) -> LiveCoordinator:
        self._thread.start()
        try:
            self.call(self._start())
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self.call(self._close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
        self._loop.close()

    async def _start(self) -> None:
        text = manifest_text(self.key, self.description, "http://127.0.0.1", self.checkpoint_url)
        manifest = parse_manifest(text)
        service = CoordinatorService(
            manifest, self.folder / "coordinator.db", self.key, scrypt_n=FAST.n
        )
        await service.start("127.0.0.1", 0)
        self.service = service
        service.store.add_user(AUX, PASSWORD, moderator=True, params=FAST)
        self._client = CoordinatorClient(service.url)
        self._aux = await self._client.login(AUX, PASSWORD)

    async def _close(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self.service is not None:
            await self.service.close()

    def report(
        self,
        epoch: int,
        loss: float | None,
        *,
        speed: float = 850.0,
        alive: int = 12,
        samples: int = 4096,
        contributions: list[dict[str, Any]] | None = None,
        ago: float = 0.0,
    ) -> dict[str, Any]:
        """The backbone's report of ``epoch``, which ended ``ago`` seconds ago."""
        body = {
            "epoch": epoch,
            "time": time.time() - ago,
            "samples": samples,
            "contributions": contributions or [],
            "loss": loss,
            "samples_per_second": speed,
            "alive_peers": alive,
        }
        assert self._client is not None
        assert self._aux is not None
        return self.call(self._client.report_contributions(self._aux, body))

    def evaluate(
        self,
        epoch: int,
        loss: float,
        *,
        accuracy: float = 0.3,
        samples: int = 256,
        floor: float | None = None,
    ) -> dict[str, Any]:
        """The backbone's held-out evaluation of ``epoch``, measured now (with the unigram
        ``floor`` where given)."""
        body = {
            "epoch": epoch,
            "loss": loss,
            "accuracy": accuracy,
            "samples": samples,
            "tokens": samples * 32,
            "seconds": 4.0,
            "time": time.time(),
            "floor": floor,
        }
        assert self._client is not None
        assert self._aux is not None
        return self.call(self._client.report_evaluation(self._aux, body))

    def volunteer(self, name: str) -> tuple[Identity, str]:
        """A volunteer's account and the pass of a peer key it proved: (peer, pass as text)."""
        return self.call(self._volunteer(name))

    async def _volunteer(self, name: str) -> tuple[Identity, str]:
        assert self.service is not None
        assert self._client is not None
        self.service.store.add_user(name, PASSWORD, params=FAST)
        tokens = await self._client.login(name, PASSWORD)
        peer = Identity.generate()
        grant = await self._client.request_pass(tokens, peer.peer_id, peer.sign, project=PROJECT)
        await self._client.logout(tokens)
        return peer, pass_to_text(grant.access)


def contribution(peer: Identity, access: str, samples: int, compute: float) -> dict[str, Any]:
    return {
        "peer": str(peer.peer_id),
        "pass": access,
        "samples": samples,
        "compute_seconds": compute,
    }


SAMPLE_FLOOR = 6.24
"""The sample project's unigram floor (the demo's): its loss starts above it and falls below."""


def sample_project(live: LiveCoordinator, epochs: int = 40) -> None:
    """A project some way into training: a falling, noisy loss, the backbone's held-out
    evaluation every fifth epoch (a little above the training loss) beside the unigram floor, and
    a leaderboard."""
    names = ("arnab", "rahima", "tanvir", "nusrat", "shafiq", "mitu", "joy")
    volunteers = [(name, *live.volunteer(name)) for name in names]
    for epoch in range(epochs):
        loss = 2.1 + 8.5 * (0.93**epoch) + 0.12 * ((epoch * 7919) % 11 - 5) / 5
        parts = [
            contribution(peer, access, 64 * (len(names) - i) + epoch % 5, 30.0 * (len(names) - i))
            for i, (_, peer, access) in enumerate(volunteers)
        ]
        samples = sum(part["samples"] for part in parts)
        live.report(
            epoch, round(loss, 4), samples=samples, contributions=parts, ago=(epochs - epoch) * 90.0
        )
        if epoch % 5 == 4:
            held_out = loss + 0.25  # text the model never saw
            accuracy = round(max(0.0, min(1.0, 0.9 - held_out / 12)), 4)
            live.evaluate(epoch, round(held_out, 4), accuracy=accuracy, floor=SAMPLE_FLOOR)
