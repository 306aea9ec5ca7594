"""Joining a project by its URL against a real coordinator on 127.0.0.1: the preview, the attach
that pins the project key (from the URL's ``#key=``, or on first use), and signed updates: a new
initial peer or data source taken (the running peer restarted for data, not for peers), a change
of the model or a manifest signed by another key refused with the reason, kept old manifest."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path
from typing import Any

import pytest

from core.api import (
    AttachRequest,
    BadRequest,
    Conflict,
    CoordinatorUnreachable,
    ManifestUpdated,
    ProjectInfo,
)
from core.engine.join.resource_use import albert_parameters
from core.engine.projects import ProjectSlot
from core.engine.store import EngineFile
from core.net import Identity
from core.project import parse_manifest
from tests.engine.standin import StandInPeer
from tests.support.engine import CtlRun, Running, until
from tests.support.leaks import poll_until
from tests.support.signed_project import PROJECT, project_text, rewrite, serving

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"


def updates(running: Running) -> list[ManifestUpdated]:
    recent = running.daemon.engine.events.recent()
    return [e.data for e in recent if isinstance(e.data, ManifestUpdated)]


def copy_of(running: Running) -> Path:
    return running.dirs.data / "projects" / PROJECT / "manifest.toml"


async def test_preview_then_attach_by_url_pins_the_key_and_keeps_a_copy(
    engine: Running, tmp_path: Path
) -> None:
    key = Identity.generate()
    text = project_text(key)
    async with serving(tmp_path, key, text) as service:
        preview = await engine.client.preview_project(service.url + "/")
        assert (preview.url, preview.name, preview.kind, preview.mode) == (
            service.url,
            PROJECT,
            "collaborative",
            "open",
        )
        assert (preview.project_key, preview.key_source, preview.version) == (
            str(key.peer_id),
            "first-use",
            1,
        )
        assert preview.description == "A project joined by its URL."
        assert preview.uses.parameters == albert_parameters(parse_manifest(text))
        assert preview.uses.network_bytes_per_hour > 0
        assert preview.uses.disk_bytes > 0
        assert preview.uses.device  # what this computer would train on, named for people
        assert (await engine.client.projects()).projects == []  # a preview attaches nothing

        request = AttachRequest(service.url, device="cpu", pinned_key=preview.project_key)
        info = await engine.client.attach(request)
        assert (info.name, info.source_url, info.project_key, info.manifest_version) == (
            PROJECT,
            service.url,
            str(key.peer_id),
            1,
        )
        assert info.update_refused is None
        assert Path(info.manifest) == copy_of(engine)
        assert copy_of(engine).read_text() == text
        again = await engine.client.preview_project(service.url)
        assert again.key_source == "pinned"
        with pytest.raises(Conflict, match="attached already"):
            await engine.client.attach(AttachRequest(service.url))

    # the slot, with its URL, key and version, is what the engine remembers across restarts
    memory = EngineFile(engine.dirs.config / "engine.toml").load()
    (slot,) = memory.projects
    assert (slot.source_url, slot.project_key, slot.manifest_version) == (
        info.source_url,
        info.project_key,
        1,
    )


async def test_the_key_in_the_url_is_checked(engine: Running, tmp_path: Path) -> None:
    key, stranger = Identity.generate(), Identity.generate()
    async with serving(tmp_path, key, project_text(key)) as service:
        named = await engine.client.preview_project(f"{service.url}/#key={key.peer_id}")
        assert named.key_source == "url"
        wrong = f"{service.url}/#key={stranger.peer_id}"
        with pytest.raises(BadRequest, match=f"signed by project key {key.peer_id}, not by"):
            await engine.client.preview_project(wrong)
        with pytest.raises(BadRequest, match="not by"):
            await engine.client.attach(AttachRequest(wrong))
        # the key accepted in the preview is checked again when attaching
        pinned = AttachRequest(service.url, pinned_key=str(stranger.peer_id))
        with pytest.raises(BadRequest, match="the key you trusted"):
            await engine.client.attach(pinned)
        assert (await engine.client.projects()).projects == []
        assert not copy_of(engine).exists()
        info = await engine.client.attach(AttachRequest(f"{service.url}/#key={key.peer_id}"))
        assert info.project_key == str(key.peer_id)


async def test_an_update_with_a_new_initial_peer_is_taken(
    engine: Running, tmp_path: Path, peers: list[StandInPeer]
) -> None:
    key = Identity.generate()
    async with serving(tmp_path, key, project_text(key)) as service:
        await engine.client.attach(AttachRequest(service.url, device="cpu"))
        await engine.client.set_settings({"max_other_cpu_percent": 100, "cpu_when_in_use": "pause"})
        await engine.client.start()
        await until(engine.client, lambda s: s.state == "running")
        assert peers[0].settings.manifest.network.initial_peers == ()

        peer = f"/ip4/192.0.2.7/tcp/31337/p2p/{key.peer_id}"
        rewrite(tmp_path / "project.toml", project_text(key, peers=[peer]))
        info = await engine.client.check_project(PROJECT)
        assert (info.manifest_version, info.update_refused) == (2, None)
        assert parse_manifest(copy_of(engine).read_text()).network.initial_peers == (peer,)
        (event,) = updates(engine)
        assert (event.version, event.applied) == (2, True)
        assert "network.initial_peers" in event.reason
        assert len(peers) == 1  # a running peer found the swarm already: taken at its next start

        data = "http://127.0.0.1:9/shard-new.jsonl"
        rewrite(tmp_path / "project.toml", project_text(key, peers=[peer], sources=[data]))
        info = await engine.client.check_project(PROJECT)
        assert info.manifest_version == 3
        # new data: the peer starts again on it at once
        await poll_until(lambda: _ready(peers, 2), bool)
        assert peers[0].closed
        assert peers[1].settings.manifest.data.sources[0].urls == (data,)
        assert peers[1].settings.manifest.network.initial_peers == (peer,)


async def _ready(peers: list[StandInPeer], count: int) -> bool:
    return len(peers) >= count


async def test_an_update_that_changes_the_model_is_refused_with_the_reason(
    engine: Running, tmp_path: Path
) -> None:
    key = Identity.generate()
    text = project_text(key)
    wider = project_text(key, hidden_size=256)
    async with serving(tmp_path, key, text) as service:
        await engine.client.attach(AttachRequest(service.url, device="cpu"))
        # edited while it runs: the coordinator itself refuses to serve a change of the model
        rewrite(tmp_path / "project.toml", wider)
        info = await engine.client.check_project(PROJECT)
        assert (info.manifest_version, info.update_refused) == (1, None)
        assert updates(engine) == []

    reason = (
        "the update changes model.hidden_size from 128 to 256, which would break training; "
        "the project's organizer must start a new project"
    )
    # restarted on the wider model, the coordinator serves it as version 2: the engine refuses it
    async with serving(tmp_path, key, wider) as service:
        follow(engine, service.url)
        info = await engine.client.check_project(PROJECT)
        assert (info.manifest_version, info.update_refused) == (1, reason)
        assert copy_of(engine).read_text() == text  # the old manifest stays
        (event,) = updates(engine)
        assert (event.version, event.applied, event.reason) == (2, False, reason)
        await engine.client.check_project(PROJECT)  # refused again: told once
        assert len(updates(engine)) == 1

    fixed = project_text(key, lr=0.02)
    async with serving(tmp_path, key, fixed) as service:  # the organizer undoes it
        follow(engine, service.url)
        info = await engine.client.check_project(PROJECT)
        assert (info.manifest_version, info.update_refused) == (3, None)
        assert copy_of(engine).read_text() == fixed


def follow(engine: Running, url: str) -> None:
    """Point the slot at a restarted coordinator (a test cannot take the old one's port again)."""
    slot = engine.daemon.engine._attached.slot(PROJECT)
    assert slot is not None
    engine.daemon.engine._attached.replace(dataclasses.replace(slot, source_url=url))


async def test_an_update_signed_by_another_key_is_refused(engine: Running, tmp_path: Path) -> None:
    """Pinned on first use; then the coordinator's key file is replaced (a take-over, or a
    mistake): what it serves now is refused, whatever it says."""
    key, usurper = Identity.generate(), Identity.generate()
    first = project_text(None)
    async with serving(tmp_path / "a", key, first) as service:
        info = await engine.client.attach(AttachRequest(service.url, device="cpu"))
        assert info.project_key == str(key.peer_id)
    peer = f"/ip4/192.0.2.66/tcp/1/p2p/{usurper.peer_id}"
    async with serving(tmp_path / "b", usurper, project_text(None, peers=[peer])) as service:
        # the usurper's coordinator answers at the project's URL now (the slot's URL is moved
        # to it: a test cannot take over the first one's port)
        slot = engine.daemon.engine._attached.slot(PROJECT)
        assert slot is not None
        moved = dataclasses.replace(slot, source_url=service.url)
        engine.daemon.engine._attached.replace(moved)
        info = await engine.client.check_project(PROJECT)
    assert info.manifest_version == 1
    assert info.update_refused is not None
    assert f"signed by project key {usurper.peer_id}, not by {key.peer_id}" in info.update_refused
    assert copy_of(engine).read_text() == first
    (event,) = updates(engine)
    assert not event.applied


async def test_a_coordinator_that_is_down_is_a_clear_error(engine: Running) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(CoordinatorUnreachable, match=f"the project at {url}/manifest does not"):
        await engine.client.preview_project(url)
    with pytest.raises(CoordinatorUnreachable, match="does not answer"):
        await engine.client.attach(AttachRequest(url))
    with pytest.raises(BadRequest, match="not a project URL"):
        await engine.client.preview_project("ftp://example.org")
    assert (await engine.client.projects()).projects == []


async def test_data_on_the_organizers_disk_is_refused_unless_a_data_base_is_given(
    engine: Running, tmp_path: Path
) -> None:
    key = Identity.generate()
    local = project_text(key, sources=["shards/a.jsonl"], tokenizer="tokenizer.json")
    async with serving(tmp_path, key, local) as service:
        preview = await engine.client.preview_project(service.url)
        assert any("shards/a.jsonl" in note for note in preview.uses.notes)
        with pytest.raises(BadRequest, match="paths on the organizer's computer"):
            await engine.client.attach(AttachRequest(service.url))
        served = AttachRequest(service.url, data_base="http://127.0.0.1:9/")
        info = await engine.client.attach(served)
        assert info.data_base == "http://127.0.0.1:9/"


async def test_a_file_project_has_no_url_to_check(engine: Running) -> None:
    await engine.client.attach(AttachRequest(str(DEMO)))
    with pytest.raises(Conflict, match="attached from a manifest file"):
        await engine.client.check_project("barnraise-demo")


def test_slots_written_before_urls_load_as_file_projects() -> None:
    old: dict[str, Any] = {
        "name": "p",
        "manifest": "/m.toml",
        "initial_peers": [],
        "device": "auto",
    }
    slot = ProjectSlot.from_table(old)
    assert (slot.source_url, slot.project_key, slot.manifest_version) == (None, None, None)
    assert "source_url" not in slot.to_table()
    joined = dataclasses.replace(slot, source_url="https://c.example.org", manifest_version=4)
    assert ProjectSlot.from_table(joined.to_table()) == joined
    with pytest.raises(TypeError, match="manifest_version"):
        ProjectSlot.from_table(old | {"manifest_version": "4"})


async def test_ctl_previews_and_attaches_by_url(
    engine: Running, tmp_path: Path, ctl_run: CtlRun
) -> None:
    key = Identity.generate()
    async with serving(tmp_path, key, project_text(key)) as service:
        shown = await ctl_run("preview", service.url)
        assert f"{PROJECT} (collaborative, manifest version 1) at {service.url}" in shown
        assert "A project joined by its URL." in shown
        assert f"project key: {key.peer_id} (not named anywhere" in shown
        said = await ctl_run("attach", service.url, "--device", "cpu")
        assert "would train on:" in said  # the preview first
        assert "parameters" in said
        assert f"from {service.url}, manifest version 1" in said
        assert f"project key {key.peer_id}: updates must be signed by it" in said
        checked = await ctl_run("check", PROJECT)
        assert "manifest version 1" in checked
    info = (await engine.client.projects()).projects[0]
    assert isinstance(info, ProjectInfo)
    assert info.source_url == service.url
