"""``barnraise export`` as organizers run it: the folder, its files and the weights' hash printed, and
one clear line with exit status 2 when the export cannot be made."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from core.cli.main import main
from tests.export.conftest import Project


def test_export_prints_the_folder_its_files_and_the_hash(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "model"
    # no --checkpoint: the newest of aux/checkpoints beside the manifest, as `project new` lays out
    assert main(["export", str(project.manifest), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    digest = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    assert str(out) in printed
    assert str(project.checkpoint) in printed
    assert f"sha256 of model.safetensors: {digest}" in printed
    for path in out.iterdir():
        assert f"{path.name} " in printed
        assert f"{path.stat().st_size:,} bytes" in printed


def test_export_refuses_a_folder_that_holds_anything(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "model"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    args = ["export", str(project.manifest), "--checkpoint", str(project.checkpoint)]
    assert main([*args, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("barnraise export: ")
    assert "not empty" in lines[0]
    assert main([*args, "--out", str(out), "--overwrite"]) == 0
    assert not (out / "notes.txt").exists()


def test_export_without_checkpoints_says_where_it_looked(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere"
    out = tmp_path / "model"
    args = ["export", str(project.manifest), "--checkpoints", str(missing), "--out", str(out)]
    assert main(args) == 2
    assert capsys.readouterr().err.strip() == f"barnraise export: no checkpoint folder at {missing}"
    assert not out.exists()


def test_checkpoint_and_checkpoints_exclude_each_other(project: Project, tmp_path: Path) -> None:
    args = ["export", str(project.manifest), "--checkpoint", "a.pt", "--checkpoints", "dir"]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--out", str(tmp_path / "m")])
    assert exited.value.code == 2
