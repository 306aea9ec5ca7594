"""The project page's "Download the model": the coordinator reads ``model.json`` at the manifest's
``network.checkpoint_url``, offers only what the project key signed, keeps it a minute, keeps the
last good one when the server fails, and shows nothing when there never was one."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from core.coordinator.published_model import TTL
from core.data.server import ShardServer
from core.training.publish.model import publish_model
from core.trust.identity import Identity
from core.trust.published_model import INDEX_NAME, HeldOut, ModelIndex
from tests.coordinator.page_support import Page, running_page
from tests.coordinator.test_page import figure

FOLDER = "pub&lic"
"""The published folder's name needs escaping in HTML, as a URL may."""


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[ShardServer]:
    (tmp_path / "served" / FOLDER).mkdir(parents=True)
    served = ShardServer(tmp_path / "served")
    await served.start()
    try:
        yield served
    finally:
        await served.close()


def public(tmp_path: Path) -> Path:
    return tmp_path / "served" / FOLDER


def publish(
    tmp_path: Path,
    key: Identity,
    epoch: int,
    *,
    architecture: str = "AlbertForMaskedLM",
    held_out: HeldOut | None = None,
) -> ModelIndex:
    exported = tmp_path / f"export-{epoch}"
    exported.mkdir(exist_ok=True)
    (exported / "config.json").write_text(json.dumps({"architectures": [architecture]}))
    (exported / "model.safetensors").write_bytes(b"\0" * 3000)
    return publish_model(
        exported,
        public(tmp_path),
        key,
        project="coord-test",
        epoch=epoch,
        architecture=architecture,
        held_out=held_out,
    )


async def model_of(page: Page) -> Any:
    return (await page.client.get("/stats")).body["model"]


async def eventually(page: Page, epoch: int | None) -> Any:
    """``/stats``' model once it is of ``epoch`` (None: no model), after the background fetch."""
    for _ in range(200):
        model = await model_of(page)
        if (model["epoch"] if model else None) == epoch:
            return model
        await asyncio.sleep(0.02)
    raise AssertionError(f"the page never showed the model of epoch {epoch}: {model}")


async def test_the_page_offers_the_model_the_project_key_signed(
    tmp_path: Path, server: ShardServer
) -> None:
    url = server.url + FOLDER
    async with running_page(tmp_path / "c", checkpoint_url=url) as page:
        index = publish(tmp_path, page.key, 30, held_out=HeldOut(28, 3.25, 0.375, 256))
        _, html, _ = await page.text("/")
        section = re.search(
            r'<section id="download" class="card download">.*?</section>', html, re.S
        )
        assert section, "no download section"
        shown = section.group(0)
        link = f"{url.replace('&', '&amp;')}/model-00000030.zip"
        assert f'<a href="{link}" id="model-link" data-figure="model_file">' in shown
        assert figure(shown, "model_file") == "model-00000030.zip"
        assert figure(shown, "model_size") == f"{index.size / 1000:.1f} kB"
        assert figure(shown, "model_epoch") == "30"
        assert figure(shown, "model_held_out") == (
            "3.25 (accuracy 37.5%, measured at epoch 28 on 256 sequences)"
        )
        assert figure(shown, "model_sha256") == index.sha256
        assert figure(shown, "model_folder") == "model-00000030"
        assert figure(shown, "model_import") == (
            "from transformers import AutoModelForMaskedLM, AutoTokenizer"
        )
        assert figure(shown, "model_load") == (
            "model = AutoModelForMaskedLM.from_pretrained(&quot;model-00000030&quot;)"
        )
        assert 'id="model_held_out-row" hidden' not in shown

        model = await model_of(page)
        assert model["url"] == f"{url}/model-00000030.zip"
        assert (model["size"], model["sha256"], model["epoch"]) == (index.size, index.sha256, 30)
        assert model["held_out"] == {"epoch": 28, "loss": 3.25, "accuracy": 0.375, "samples": 256}
        stats = (await page.client.get("/stats")).body
        assert stats["display"]["model_load"] == (
            'model = AutoModelForMaskedLM.from_pretrained("model-00000030")'
        )


async def test_the_models_held_out_loss_stands_beside_its_floor(
    tmp_path: Path, server: ShardServer
) -> None:
    async with running_page(tmp_path / "c", checkpoint_url=server.url + FOLDER) as page:
        publish(tmp_path, page.key, 30, held_out=HeldOut(28, 5.75, 0.375, 256, 6.25))
        _, html, _ = await page.text("/")
        assert figure(html, "model_held_out") == (
            "5.75 (accuracy 37.5%, measured at epoch 28 on 256 sequences), 0.50 below the "
            "unigram floor (6.25)"
        )
        model = await model_of(page)
        assert model["held_out"]["floor"] == 6.25


async def test_a_causal_model_loads_with_its_auto_class(
    tmp_path: Path, server: ShardServer
) -> None:
    async with running_page(tmp_path / "c", checkpoint_url=server.url + FOLDER) as page:
        publish(tmp_path, page.key, 4, architecture="LlamaForCausalLM")
        _, html, _ = await page.text("/")
        assert figure(html, "model_import") == (
            "from transformers import AutoModelForCausalLM, AutoTokenizer"
        )
        assert '<div id="model_held_out-row" hidden>' in html  # no held-out figures in the index


async def test_the_index_is_kept_a_minute_and_the_last_good_one_survives_failures(
    tmp_path: Path, server: ShardServer
) -> None:
    async with running_page(tmp_path / "c", checkpoint_url=server.url + FOLDER) as page:
        publish(tmp_path, page.key, 10)
        assert (await eventually(page, 10))["file"] == "model-00000010.zip"
        publish(tmp_path, page.key, 20)
        page.clock.advance(TTL - 1)
        assert (await model_of(page))["epoch"] == 10  # not asked again within the minute
        page.clock.advance(1)
        await eventually(page, 20)

        # a forged index (another key), then none at all: the last good one stays on the page
        index = public(tmp_path) / INDEX_NAME
        forged = publish(tmp_path, Identity.generate(), 30)
        page.clock.advance(TTL)
        await model_of(page)  # starts the fetch
        await asyncio.sleep(0.3)
        assert (await model_of(page))["epoch"] == 20
        assert json.loads(index.read_text())["file"] == forged.file
        index.unlink()
        page.clock.advance(TTL)
        await model_of(page)
        await asyncio.sleep(0.3)
        assert (await model_of(page))["epoch"] == 20
        _, html, _ = await page.text("/")
        assert '<section id="download" class="card download">' in html


@pytest.mark.parametrize(
    "tamper",
    ["signature", "held_out", "path", "no file", "not json", "other project"],
)
async def test_a_tampered_index_is_never_offered(
    tmp_path: Path, server: ShardServer, tamper: str
) -> None:
    async with running_page(tmp_path / "c", checkpoint_url=server.url + FOLDER) as page:
        signed = publish(tmp_path, page.key, 10, held_out=HeldOut(9, 3.0, 0.5, 64))
        index = public(tmp_path) / INDEX_NAME
        document = signed.to_json()
        if tamper == "signature":
            document["signature"] = Identity.generate().sign(signed.payload()).hex()
        elif tamper == "held_out":
            document["held_out"]["loss"] = 1.0  # a better figure than the one measured
        elif tamper == "path":
            document["file"] = "../../etc/model-00000010.zip"
        elif tamper == "no file":
            del document["file"]
        elif tamper == "other project":
            other = publish_model(
                tmp_path / "export-10",
                tmp_path / "elsewhere",
                page.key,
                project="another-project",
                epoch=10,
                architecture="AlbertForMaskedLM",
                held_out=None,
            )
            document = other.to_json()
        text = "{not json" if tamper == "not json" else json.dumps(document)
        index.write_text(text)
        _, html, _ = await page.text("/")
        assert '<section id="download" class="card download" hidden>' in html
        assert '<a id="model-link" data-figure="model_file"></a>' in html  # no link
        assert await model_of(page) is None


async def test_without_a_checkpoint_url_or_a_model_the_page_offers_nothing(
    tmp_path: Path, server: ShardServer
) -> None:
    async with running_page(tmp_path / "a") as page:
        _, html, _ = await page.text("/")
        assert '<section id="download" class="card download" hidden>' in html
        stats = (await page.client.get("/stats")).body
        assert stats["model"] is None
        assert stats["display"]["model_file"] == ""
    # a URL where nothing was published yet, then something is
    async with running_page(tmp_path / "b", checkpoint_url=server.url + FOLDER) as page:
        _, html, _ = await page.text("/")
        assert '<section id="download" class="card download" hidden>' in html
        publish(tmp_path, page.key, 5)
        page.clock.advance(TTL)
        await eventually(page, 5)
