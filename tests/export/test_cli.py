"""``barnraise export`` as organizers run it: the folder, its files and the weights' hash printed, and
one clear line with exit status 2 when the export cannot be made."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from core.cli.main import main
from tests.export.conftest import Project, epoch_line, held_out, save, write_lines


def test_export_prints_the_folder_its_files_and_the_hash(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "model"
    # no --checkpoint: the newest of backbone/checkpoints beside the manifest, as `project new` lays out
    assert main(["export", str(project.manifest), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    digest = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    assert str(out) in printed
    assert str(project.checkpoint) in printed
    assert f"sha256 of model.safetensors: {digest}" in printed
    for path in out.iterdir():
        assert f"{path.name} " in printed
        assert f"{path.stat().st_size:,} bytes" in printed


def test_a_project_an_earlier_release_made_exports_from_its_aux_folder(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # such a project's services keep the backbone's checkpoints and logs in aux/
    earlier = project.folder / "aux"
    shutil.move(project.checkpoints.parent, earlier)
    write_lines(earlier / "metrics.jsonl", [epoch_line(e, {"peer-a": 256}) for e in range(3)])
    out = tmp_path / "model"
    assert main(["export", str(project.manifest), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert str(earlier / "checkpoints" / project.checkpoint.name) in printed
    assert f"contributors: 1 peer(s), from {earlier / 'metrics.jsonl'}" in printed


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


def test_the_card_reads_the_backbone_folder_beside_the_checkpoints(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    aux = project.checkpoints.parent
    save(project.model, project.checkpoints, 110, samples_total=28_160)
    write_lines(
        aux / "evaluation.jsonl",
        [held_out(100, 5.9), "{broken", held_out(110, 5.7312), held_out(120, 5.1)],
    )
    write_lines(aux / "metrics.jsonl", [epoch_line(e, {"peer-a": 256}) for e in range(110)])
    out = tmp_path / "model"
    # no --checkpoint: the newest of backbone/checkpoints, and backbone/ holds the backbone's logs
    assert main(["export", str(project.manifest), "--out", str(out)]) == 0
    card = (out / "README.md").read_text()
    assert "checkpoint of epoch 110, after 28,160 samples in all" in card
    assert "measured at its epoch 110: loss 5.7312 nats per masked token, 0.51 below" in card
    assert " 1 peer(s) contributed to it" in card
    printed = capsys.readouterr().out
    assert "samples: 28,160 before epoch 110, as the checkpoint records" in printed
    assert (
        f"held-out figures: of epoch 110, from {aux / 'evaluation.jsonl'} "
        "(1 damaged line(s) skipped)"
    ) in printed
    assert f"contributors: 1 peer(s), from {aux / 'metrics.jsonl'}" in printed


def test_an_old_checkpoint_elsewhere_is_exported_saying_what_is_unknown(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a checkpoint copied away from its backbone: its logs are named with --backbone-dir
    elsewhere = tmp_path / "downloads" / "checkpoint-00000007.pt"
    elsewhere.parent.mkdir()
    shutil.copy(project.checkpoint, elsewhere)
    args = ["export", str(project.manifest), "--checkpoint", str(elsewhere)]
    assert main([*args, "--out", str(tmp_path / "m")]) == 0
    printed = capsys.readouterr().out
    assert "samples: unknown, the checkpoint does not record them" in printed
    missing = tmp_path / "evaluation.jsonl"
    assert (
        "held-out figures: none, the collaboration's backbone logged no held-out evaluation "
        f"({missing})"
    ) in printed
    assert (
        f"contributors: not stated, {tmp_path / 'metrics.jsonl'} has no epoch before 7" in printed
    )
    card = (tmp_path / "m" / "README.md").read_text()
    assert "Not evaluated: the collaboration's backbone logged no held-out evaluation." in card

    write_lines(project.checkpoints.parent / "evaluation.jsonl", [held_out(5, 6.0)])
    backbone = ["--backbone-dir", str(project.checkpoints.parent)]
    assert main([*args, *backbone, "--out", str(tmp_path / "n")]) == 0
    card = (tmp_path / "n" / "README.md").read_text()
    assert "measured at epoch 5, the newest evaluation before this checkpoint: loss 6.0000" in card
