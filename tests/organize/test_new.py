"""``create_project``: the folder it writes, appearing whole or not at all, never over files."""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
from pathlib import Path

import pytest

from core.coordinator import CoordinatorStore, Password
from core.coordinator.people.passwords import verify_password
from core.data import ShardServerThread
from core.net.host.address import PeerAddress
from core.organize import new as new_module
from core.organize.check import check_project
from core.organize.findings import failed
from core.organize.presets import PRESETS, Preset
from core.project import DmoeManifest, Manifest, load_any_manifest, load_manifest
from core.swarm.demo_data import DEMO_MANIFEST
from core.trust.identity import Identity
from core.util.errors import ConfigError
from tests.organize.conftest import DATA, PASSWORD, answers, make_project

SERVICES = {"barnraise-dht.service", "barnraise-coordinator.service", "barnraise-backbone.service"}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_folder_holds_the_manifest_keys_database_and_services(tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    made = make_project(folder, answers(mode="moderated"))
    assert made.folder == folder
    manifest = load_any_manifest(folder / "project.toml")
    assert isinstance(manifest, Manifest)
    assert manifest == dataclasses.replace(made.manifest, path=manifest.path)
    key = Identity.load(folder / "project-key.pem").peer_id
    assert manifest.access.project_key == str(key)
    assert manifest.access.mode == "moderated"
    assert manifest.access.allow_signup
    assert manifest.network.coordinator_url == "http://127.0.0.1:18470"
    assert manifest.data.sources[0].urls == DATA
    dht = PeerAddress.parse(manifest.network.initial_peers[0])
    assert (dht.host, dht.port) == ("127.0.0.1", 4003)
    assert dht.peer_id == Identity.load(folder / "dht-key.pem").peer_id
    assert made.project_url == f"http://127.0.0.1:18470/#key={key}"
    with CoordinatorStore(folder / "coordinator.db") as store:
        (user,) = store.users()
        assert (user.name, user.role, user.allowlisted) == ("Ada", "moderator", True)
        stored = store.accounts.password_hash(user.key)
        assert stored is not None
        assert verify_password(Password(PASSWORD), stored)
    services = {p.name for p in (folder / "services").iterdir() if p.suffix == ".service"}
    assert services == SERVICES
    assert (
        (folder / "services" / "backbone.env")
        .read_text()
        .endswith(f"BARNRAISE_PASSWORD='{PASSWORD}'\n")
    )
    if os.name == "posix":
        for private in (
            "project-key.pem",
            "dht-key.pem",
            "coordinator.db",
            "services/backbone.env",
        ):
            assert mode(folder / private) == 0o600, private
        assert mode(folder / "project.toml") == 0o644
    assert set(made.written) >= {"project.toml", "services/README.txt", "services/compose.yaml"}
    # a moderated project's peers refuse peers without a pass: the DHT node logs in for one
    dht = next(program for program in made.programs if program.name == "dht")
    assert dht.logs_in
    assert dht.args[-4:] == ("--manifest", "project.toml", "--username", "Ada")
    assert not (folder / "data").exists()
    (coordinator,) = [p.args for p in made.programs if p.name == "coordinator"]
    assert "--data" not in coordinator  # the data is the organizer's, at its own URLs
    assert [p.name for p in tmp_path.iterdir()] == ["proj"]  # no staging folder left


def test_a_dmoe_project_hosts_experts_instead_of_a_backbone(tmp_path: Path) -> None:
    made = make_project(tmp_path / "moe", answers("moe", kind="dmoe", mode="open"))
    manifest = load_any_manifest(tmp_path / "moe" / "project.toml")
    assert isinstance(manifest, DmoeManifest)
    assert manifest.access.mode == "open"
    assert [p.name for p in made.programs] == ["coordinator", "dht", "experts"]
    assert made.programs[1].args == ("dht", "--identity", "dht-key.pem", "--port", "4003")
    assert (tmp_path / "moe" / "services" / "barnraise-experts.service").is_file()
    findings = check_project(tmp_path / "moe" / "project.toml")
    assert not failed(findings), findings
    assert "1,438 training and 359 test images" in findings[-1].message


def test_a_folder_that_holds_anything_is_refused_and_left_alone(tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="already exists and is not empty"):
        make_project(folder)
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    assert (folder / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is not a folder"):
        make_project(tmp_path / "file")


def test_an_empty_folder_is_used(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    make_project(tmp_path / "proj")
    assert (tmp_path / "proj" / "project.toml").is_file()


@pytest.mark.parametrize(
    ("password", "words"),
    [("short", "8 to 1024 characters"), ("it's a secret", "without '"), ("tab\there", "control")],
)
def test_a_password_that_cannot_be_used_writes_nothing(
    tmp_path: Path, password: str, words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        make_project(tmp_path / "proj", password=password)
    assert list(tmp_path.iterdir()) == []


def test_a_failure_on_the_way_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> None:
        raise ConfigError("the disk is full")

    monkeypatch.setattr(new_module, "_add_organizer", broken)
    with pytest.raises(ConfigError, match="the disk is full"):
        make_project(tmp_path / "proj")
    assert list(tmp_path.iterdir()) == []


def test_the_demo_data_goes_into_data_which_the_coordinator_serves(
    tmp_path: Path, demo_data: Path
) -> None:
    folder = tmp_path / "demo"
    made = make_project(folder, answers("demo", data=None), demo_cache=demo_data)
    assert isinstance(made.manifest, Manifest)
    assert "data/tokenizer.json" in made.written
    assert len(list((folder / "data" / "shards").glob("shard-*.jsonl.gz"))) == 8
    # data/ holds the public files only
    assert {p.name for p in (folder / "data").iterdir()} == {"shards", "tokenizer.json"}
    assert not (folder / "shards").exists()
    served = "http://127.0.0.1:18470/data/"
    assert made.manifest.data.sources[0].urls[0] == f"{served}shards/shard-00000.jsonl.gz"
    assert made.manifest.data.tokenizer == f"{served}tokenizer.json"
    # the held-out modules go with the demo's data, for the backbone's evaluation
    assert (folder / "data" / "shards" / "held-out" / "shard-00000.jsonl.gz").is_file()
    assert made.manifest.evaluation.urls == (f"{served}shards/held-out/shard-00000.jsonl.gz",)
    (coordinator,) = [p.args for p in made.programs if p.name == "coordinator"]
    assert coordinator[-2:] == ("--data", "data")
    readme = " ".join((folder / "services" / "README.txt").read_text().split())
    assert f"names the files under data/ at {served} and the coordinator serves them" in readme
    assert f"served by the coordinator at {served}" in readme


def test_data_published_at_a_url_is_named_there_and_checks_out(
    tmp_path: Path, demo_data: Path
) -> None:
    published = tmp_path / "www"
    published.mkdir()
    with ShardServerThread(published) as server:
        folder = tmp_path / "demo"
        settled = answers("demo", data=None, data_url=server.url.rstrip("/"))
        made = make_project(folder, settled, demo_cache=demo_data)
        assert isinstance(made.manifest, Manifest)
        assert made.manifest.data.sources[0].urls[0] == f"{server.url}shards/shard-00000.jsonl.gz"
        assert made.manifest.data.tokenizer == f"{server.url}tokenizer.json"
        readme = (folder / "services" / "README.txt").read_text()
        assert f"under {server.url}" in readme
        assert "never this folder" in readme
        # not published yet: every shard is an error, the tokenizer a warning
        assert failed(check_project(folder / "project.toml", timeout=5))
        (coordinator,) = [p.args for p in made.programs if p.name == "coordinator"]
        assert "--data" not in coordinator  # published elsewhere: the coordinator serves none
        assert "publish the contents of data/ there" in readme
        shutil.copytree(folder / "data", published, dirs_exist_ok=True)
        findings = check_project(folder / "project.toml", timeout=5)
        assert not failed(findings), findings


def test_paths_in_the_manifest_are_explained_in_the_readme(tmp_path: Path) -> None:
    made = make_project(tmp_path / "p", answers(data=("shards/mine.jsonl",)))
    assert isinstance(made.manifest, Manifest)
    assert made.manifest.evaluation.urls == ()  # the demo's held-out text is not theirs
    readme = (tmp_path / "p" / "services" / "README.txt").read_text()
    assert "names 2 file(s) by their paths here (e.g. shards/mine.jsonl)" in readme  # + tokenizer
    assert "--data-url URL" in readme


@pytest.mark.parametrize("preset", [p for p in PRESETS.values() if p.uses_demo_data])
def test_a_preset_on_the_demo_data_names_the_demo_shards_and_tokenizer(preset: Preset) -> None:
    # the new project's data/ is filled with the demo's files: the preset must name those
    demo = load_manifest(DEMO_MANIFEST)
    manifest = preset.load()
    assert isinstance(manifest, Manifest)
    assert manifest.data.sources == demo.data.sources
    assert manifest.data.tokenizer == demo.data.tokenizer
    assert manifest.model.vocab_size == demo.data.tokenizer_vocab_size
    assert manifest.evaluation.urls == demo.evaluation.urls


def test_the_llama_demo_writes_the_demo_data_and_checks_out(
    tmp_path: Path, demo_data: Path
) -> None:
    published = tmp_path / "www"
    published.mkdir()
    with ShardServerThread(published) as server:
        folder = tmp_path / "llama"
        settled = answers("llama", preset="llama-demo", data=None, data_url=server.url.rstrip("/"))
        made = make_project(folder, settled, demo_cache=demo_data)
        assert isinstance(made.manifest, Manifest)
        assert made.manifest.model.kind == "llama-clm"
        assert load_any_manifest(folder / "project.toml") == dataclasses.replace(
            made.manifest, path=folder / "project.toml"
        )
        assert len(list((folder / "data" / "shards").glob("shard-*.jsonl.gz"))) == 8
        shutil.copytree(folder / "data", published, dirs_exist_ok=True)
        findings = check_project(folder / "project.toml", timeout=5)
        assert not failed(findings), findings
