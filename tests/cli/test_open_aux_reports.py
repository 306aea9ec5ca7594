"""``barnraise aux --username U`` in an open project: it logs in to the coordinator and reports its
epochs, so that the project page has live figures; without a coordinator it says what to set."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from core.cli.peer import command as peer_cli
from core.config.environment import PASSWORD_VARIABLE
from core.training.credit.metrics import EpochMetrics
from core.training.peer.project_peer import PeerSettings
from core.trust.reports import EpochFigures
from core.util.errors import ConfigError
from tests.coordinator.conftest import PASSWORD
from tests.coordinator.page_support import AUX, page_manifest, running_page


def parse(*options: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    peer_cli.register(parser.add_subparsers())
    return parser.parse_args(["aux", *options])


async def test_an_open_projects_aux_peer_with_an_account_reports_its_epochs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_page(tmp_path, mode="open") as page:
        manifest = tmp_path / "project.toml"
        text = page_manifest(page.key, mode="open").replace(
            "http://127.0.0.1:8470", page.service.url
        )
        manifest.write_text(text)
        when = page.clock.time()
        served: list[PeerSettings] = []

        async def serve(settings: PeerSettings, stop: asyncio.Event) -> int:
            # what the running peer does at the end of each epoch, here once
            assert settings.on_metrics is not None
            assert settings.access is None  # an open project: no pass
            settings.on_metrics(EpochMetrics(4, 2.75, 512, 88.0, 3, when))
            served.append(settings)
            return 0

        monkeypatch.setattr(peer_cli, "_serve", serve)
        monkeypatch.setattr(peer_cli, "stop_on_signals", lambda stop: None)
        monkeypatch.setenv(PASSWORD_VARIABLE, PASSWORD)
        args = parse("--manifest", str(manifest), "--username", AUX, "--work-dir", str(tmp_path))
        assert await peer_cli._run(args) == 0
        assert len(served) == 1
        # the queued report was sent before the peer logged out
        latest = page.service.store.figures.latest()
        assert latest is not None
        assert latest.figures == EpochFigures(4, when, 2.75, 88.0, 3)
        stats = (await page.client.get("/stats")).body
        assert (stats["epoch"], stats["volunteers_online"]) == (4, 3)


async def test_without_an_account_the_open_aux_peer_reports_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_page(tmp_path, mode="open") as page:
        manifest = tmp_path / "project.toml"
        manifest.write_text(page_manifest(page.key, mode="open"))

        async def serve(settings: PeerSettings, stop: asyncio.Event) -> int:
            assert settings.on_metrics is None
            return 0

        monkeypatch.setattr(peer_cli, "_serve", serve)
        monkeypatch.setattr(peer_cli, "stop_on_signals", lambda stop: None)
        args = parse("--manifest", str(manifest), "--work-dir", str(tmp_path))
        assert await peer_cli._run(args) == 0
        assert page.service.store.figures.latest() is None


async def test_an_account_without_a_coordinator_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = tmp_path / "project.toml"
    text = page_manifest(peer_cli.Identity.generate(), mode="open")
    manifest.write_text(text.replace('coordinator_url = "http://127.0.0.1:8470"', ""))
    monkeypatch.setattr(peer_cli, "stop_on_signals", lambda stop: None)
    monkeypatch.setenv(PASSWORD_VARIABLE, PASSWORD)
    args = parse("--manifest", str(manifest), "--username", AUX, "--work-dir", str(tmp_path))
    with pytest.raises(ConfigError, match="names no coordinator to report to"):
        await peer_cli._run(args)
