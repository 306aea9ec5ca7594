"""``barnraise aux --publish-checkpoints FOLDER --project-key PATH``: the options and their checks."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from core.cli.peer.backbone import publishing_from_args
from core.cli.peer.command import register
from core.project import Manifest, load_manifest
from core.trust.errors import IdentityError
from core.trust.identity import Identity
from core.util.errors import ConfigError

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"
KEY = Identity.from_seed(bytes(range(32)))


def parse(*options: str, role: str = "backbone") -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args([role, "--manifest", str(DEMO), *options])


def manifest(project_key: Identity | None = KEY) -> Manifest:
    named = "" if project_key is None else str(project_key.peer_id)
    return load_manifest(DEMO).with_access(project_key=named)


def key_file(tmp_path: Path, key: Identity = KEY) -> Path:
    path = tmp_path / "project-key.pem"
    key.save(path)
    return path


def test_publishing_with_the_manifests_key(tmp_path: Path) -> None:
    key = key_file(tmp_path)
    args = parse("--publish-checkpoints", str(tmp_path / "www"), "--project-key", str(key))
    publishing = publishing_from_args(args, manifest())
    assert publishing is not None
    assert publishing.folder == tmp_path / "www"
    assert publishing.project_key.peer_id == KEY.peer_id
    assert publishing.project == "barnraise-demo"


def test_no_publishing_without_the_option() -> None:
    assert publishing_from_args(parse(), manifest()) is None
    assert publishing_from_args(parse(role="peer"), manifest()) is None


def test_a_key_of_another_project_is_refused(tmp_path: Path) -> None:
    key = key_file(tmp_path, Identity.from_seed(bytes(range(1, 33))))
    args = parse("--publish-checkpoints", str(tmp_path / "www"), "--project-key", str(key))
    with pytest.raises(ConfigError, match=f"manifest names project key {KEY.peer_id}") as caught:
        publishing_from_args(args, manifest())
    assert str(key) in str(caught.value)


def test_a_manifest_without_a_key_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = key_file(tmp_path)
    args = parse("--publish-checkpoints", str(tmp_path / "www"), "--project-key", str(key))
    with caplog.at_level(logging.WARNING, logger="core.cli.peer.backbone"):
        publishing = publishing_from_args(args, manifest(project_key=None))
    assert publishing is not None
    assert f"access.project_key = '{KEY.peer_id}'" in caplog.text


def test_options_that_do_not_go_together(tmp_path: Path) -> None:
    key = key_file(tmp_path)
    with pytest.raises(ConfigError, match="needs --project-key"):
        publishing_from_args(parse("--publish-checkpoints", str(tmp_path)), manifest())
    with pytest.raises(ConfigError, match="only with --publish-checkpoints"):
        publishing_from_args(parse("--project-key", str(key)), manifest())
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        publishing_from_args(
            parse("--publish-checkpoints", str(key), "--project-key", str(key)), manifest()
        )
    with pytest.raises(IdentityError, match="cannot read identity file"):
        publishing_from_args(
            parse("--publish-checkpoints", str(tmp_path), "--project-key", str(tmp_path / "no")),
            manifest(),
        )
