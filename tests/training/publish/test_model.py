"""The model published beside each checkpoint: a tiny real model exported, packed and signed next
to its checkpoint, loadable by transformers as the project page says; every tampered index or
archive refused; a failed export changing nothing else."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import zipfile
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import torch

import core.export.kinds
from core.cli.peer.backbone import with_model_export
from core.data import train_tokenizer
from core.project import load_manifest
from core.training.credit.metrics import MetricsLog
from core.training.peer.roles import EVALUATION_LOG
from core.training.publish.checkpoint import INDEX_NAME, CheckpointPublishing
from core.training.publish.model import HeldOutHistory, publish_model
from core.trust.identity import Identity
from core.trust.published_model import (
    INDEX_NAME as MODEL_INDEX,
)
from core.trust.published_model import (
    HeldOut,
    ModelIndex,
    PublishedModelError,
    sign_model_index,
)
from core.worker.events import PeerEvaluation
from tests.export.conftest import TEXTS, manifest_text, save, trained

KEY = Identity.from_seed(bytes(range(32)))
OTHER_KEY = Identity.from_seed(bytes(range(1, 33)))
PROJECT = "tiny-export"
EPOCH = 7
WEIGHTS_FILES = {
    "README.md",
    "config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
}


def evaluation(epoch: int, loss: float | None, accuracy: float = 0.25) -> PeerEvaluation:
    return PeerEvaluation(epoch, loss, accuracy, 64, 1024, 2.0, 1_700_000_000.0)


# ---- the signed index --------------------------------------------------------------------------


def signed(**changes: Any) -> ModelIndex:
    fields: dict[str, Any] = {
        "project": PROJECT,
        "epoch": 30,
        "architecture": "AlbertForMaskedLM",
        "held_out": HeldOut(28, 3.5, 0.25, 256),
        "file": "model-00000030.zip",
        "size": 1234,
        "sha256": "ab" * 32,
        "published_at": 1_700_000_000.0,
    }
    fields.update(changes)
    return sign_model_index(KEY, **fields)


def test_an_index_survives_its_json_and_is_the_project_keys() -> None:
    index = signed()
    document = json.loads(json.dumps(index.to_json()))
    read = ModelIndex.from_json(document, "model.json")
    assert read == index
    read.check(PROJECT, KEY.peer_id, "model.json")
    assert (read.folder, read.auto_class) == ("model-00000030", "AutoModelForMaskedLM")
    assert signed(architecture="LlamaForCausalLM").auto_class == "AutoModelForCausalLM"
    without = ModelIndex.from_json(signed(held_out=None).to_json(), "model.json")
    without.check(PROJECT, KEY.peer_id, "model.json")
    assert without.held_out is None


def test_the_floor_is_signed_with_the_held_out_figures() -> None:
    index = signed(held_out=HeldOut(28, 3.5, 0.25, 256, 6.25))
    document = json.loads(json.dumps(index.to_json()))
    assert document["held_out"] == {
        "epoch": 28, "loss": 3.5, "accuracy": 0.25, "samples": 256, "floor": 6.25
    }  # fmt: skip
    read = ModelIndex.from_json(document, "model.json")
    read.check(PROJECT, KEY.peer_id, "model.json")
    assert read.held_out == HeldOut(28, 3.5, 0.25, 256, 6.25)
    # without a floor the index is the one signed before there was one: four figures
    assert "floor" not in signed().to_json()["held_out"]
    # the floor is part of what the key signed: changed or dropped, the check fails
    for floor in (5.0, None):
        changed = {**document["held_out"], "floor": floor}
        tampered = ModelIndex.from_json({**document, "held_out": changed}, "model.json")
        with pytest.raises(PublishedModelError, match="not signed by the project key"):
            tampered.check(PROJECT, KEY.peer_id, "model.json")


@pytest.mark.parametrize(
    "change",
    [
        {"epoch": 31},
        {"held_out": {"epoch": 28, "loss": 1.0, "accuracy": 0.25, "samples": 256}},
        {"held_out": None},
        {"size": 1},
        {"sha256": "cd" * 32},
        {"file": "model-00000031.zip"},
        {"architecture": "AlbertModel"},
        {"published_at": 1.0},
    ],
)
def test_a_tampered_index_fails_its_signature(change: dict[str, Any]) -> None:
    document = {**signed().to_json(), **change}
    index = ModelIndex.from_json(document, "model.json")
    with pytest.raises(PublishedModelError, match="not signed by the project key"):
        index.check(PROJECT, KEY.peer_id, "model.json")


def test_another_key_or_project_is_refused() -> None:
    index = signed()
    with pytest.raises(PublishedModelError, match="not signed by the project key"):
        index.check(PROJECT, OTHER_KEY.peer_id, "model.json")
    with pytest.raises(PublishedModelError, match="of project 'tiny-export', not 'other'"):
        index.check("other", KEY.peer_id, "model.json")
    forged = sign_model_index(OTHER_KEY, **{
        f.name: getattr(index, f.name)
        for f in dataclasses.fields(index)
        if f.name != "signature"
    })  # fmt: skip
    with pytest.raises(PublishedModelError, match="not signed by the project key"):
        forged.check(PROJECT, KEY.peer_id, "model.json")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"file": "../model-00000030.zip"}, "not a plain model archive name"),
        ({"file": "/etc/model-00000030.zip"}, "not a plain model archive name"),
        ({"file": "sub/model-00000030.zip"}, "not a plain model archive name"),
        ({"file": "https://evil.example/model-00000030.zip"}, "not a plain model archive name"),
        ({"file": "model-30.zip"}, "not a plain model archive name"),
        ({"sha256": "AB" * 32}, "sha256"),
        ({"sha256": "ab" * 31}, "sha256"),
        ({"signature": "00"}, "signature"),
        ({"size": -1}, "size"),
        ({"size": True}, "size"),
        ({"epoch": "30"}, "epoch"),
        ({"architecture": "<script>"}, "architecture"),
        ({"held_out": {"epoch": 1, "loss": float("nan"), "accuracy": 0.5, "samples": 1}}, "loss"),
        ({"held_out": {"epoch": 1, "loss": 1.0, "accuracy": 1.5, "samples": 1}}, "accuracy"),
        ({"held_out": [1, 2]}, "held_out"),
        (
            {"held_out": {"epoch": 1, "loss": 1.0, "accuracy": 0.5, "samples": 1, "floor": -1}},
            "floor",
        ),
        (
            {"held_out": {"epoch": 1, "loss": 1.0, "accuracy": 0.5, "samples": 1, "floor": "6"}},
            "floor",
        ),
        ({"format": 2}, "format"),
    ],
)
def test_a_malformed_index_is_refused(change: dict[str, Any], words: str) -> None:
    document = {**signed().to_json(), **change}
    with pytest.raises(PublishedModelError, match=words):
        ModelIndex.from_json(document, "model.json")
    without = {k: v for k, v in signed().to_json().items() if k != "sha256"}
    with pytest.raises(PublishedModelError, match="lacks sha256"):
        ModelIndex.from_json(without, "model.json")


# ---- publishing a folder -----------------------------------------------------------------------


def exported_folder(tmp_path: Path, text: str = "weights") -> Path:
    folder = tmp_path / "export"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text('{"architectures": ["AlbertForMaskedLM"]}')
    (folder / "model.safetensors").write_text(text)
    return folder


def publish(tmp_path: Path, public: Path, epoch: int) -> ModelIndex:
    return publish_model(
        exported_folder(tmp_path, f"weights of {epoch}"),
        public,
        KEY,
        project=PROJECT,
        epoch=epoch,
        architecture="AlbertForMaskedLM",
        held_out=HeldOut(epoch, 3.0, 0.5, 16),
    )


def test_the_archive_and_its_index_are_published_the_previous_one_kept(tmp_path: Path) -> None:
    public = tmp_path / "public"
    first = publish(tmp_path, public, 10)
    archive = public / first.file
    with zipfile.ZipFile(archive) as packed:
        assert sorted(packed.namelist()) == [
            "model-00000010/config.json",
            "model-00000010/model.safetensors",
        ]
        info = packed.getinfo("model-00000010/model.safetensors")
        assert info.compress_type == zipfile.ZIP_STORED  # weights are not deflated
        assert packed.read("model-00000010/model.safetensors") == b"weights of 10"
    first.check_file(archive)
    index = ModelIndex.from_json(json.loads((public / MODEL_INDEX).read_text()), "model.json")
    assert index == first
    index.check(PROJECT, KEY.peer_id, "model.json")
    assert oct(archive.stat().st_mode & 0o777) == "0o644"

    publish(tmp_path, public, 20)
    third = publish(tmp_path, public, 30)
    # the newest and the one the index named before it; nothing half-written
    assert sorted(p.name for p in public.iterdir()) == sorted(
        [MODEL_INDEX, "model-00000020.zip", "model-00000030.zip"]
    )
    assert json.loads((public / MODEL_INDEX).read_text())["file"] == third.file


def test_a_tampered_or_truncated_archive_is_refused(tmp_path: Path) -> None:
    public = tmp_path / "public"
    index = publish(tmp_path, public, 10)
    archive = public / index.file
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0x01
    altered = tmp_path / "altered.zip"
    altered.write_bytes(bytes(data))
    with pytest.raises(PublishedModelError, match="does not match its index"):
        index.check_file(altered)
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(bytes(data[:-10]))
    with pytest.raises(PublishedModelError, match="truncated"):
        index.check_file(truncated)
    with pytest.raises(PublishedModelError, match="cannot read"):
        index.check_file(tmp_path / "absent.zip")


def test_the_held_out_history_gives_the_newest_at_or_before_an_epoch(tmp_path: Path) -> None:
    history = HeldOutHistory(kept=3)
    assert history.at_or_before(100) is None
    history.record(evaluation(2, 5.0))
    history.record(evaluation(4, None))  # not finite: nothing to publish
    history.record(evaluation(6, 4.0, accuracy=1.2))
    assert history.at_or_before(1) is None
    assert history.at_or_before(5) == HeldOut(2, 5.0, 0.25, 64)
    assert history.at_or_before(6) == HeldOut(6, 4.0, 1.0, 64)
    for epoch in (8, 10):
        history.record(evaluation(epoch, 3.0))
    assert history.at_or_before(5) is None  # the oldest were let go
    logged: list[dict[str, Any]] = [
        {"epoch": 20, "loss": 2.0, "accuracy": 0.5, "samples": 8, "tokens": 80},
        {"epoch": "junk"},
        {"loss": 1.0},
        {"epoch": 22, "loss": None, "accuracy": 0.5, "samples": 8},
    ]
    history.record_all(logged)
    assert history.at_or_before(23) == HeldOut(20, 2.0, 0.5, 8)


def test_the_held_out_history_keeps_the_floor_from_events_and_the_log(tmp_path: Path) -> None:
    history = HeldOutHistory()
    history.record(dataclasses.replace(evaluation(2, 5.0), floor=6.25))
    history.record(dataclasses.replace(evaluation(4, 4.5), floor=float("nan")))
    assert history.at_or_before(3) == HeldOut(2, 5.0, 0.25, 64, 6.25)
    assert history.at_or_before(4) == HeldOut(4, 4.5, 0.25, 64)  # a floor no index takes
    # evaluation.jsonl holds the event's fields (the backbone writes them as they are)
    log = MetricsLog(tmp_path / EVALUATION_LOG)
    log.write_record(dataclasses.asdict(dataclasses.replace(evaluation(8, 3.0), floor=6.5)))
    log.write_record(dataclasses.asdict(evaluation(9, 2.75)))
    log.write_record({"epoch": 10, "loss": 2.5, "accuracy": 0.5, "samples": 8, "floor": "x"})
    assert json.loads((tmp_path / EVALUATION_LOG).read_text().splitlines()[0])["floor"] == 6.5
    history.record_all(log.records())
    assert history.at_or_before(8) == HeldOut(8, 3.0, 0.25, 64, 6.5)
    assert history.at_or_before(9) == HeldOut(9, 2.75, 0.25, 64)  # a line of a run without one
    assert history.at_or_before(10) == HeldOut(9, 2.75, 0.25, 64)  # not a floor: not a line


# ---- the export beside a checkpoint ------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    train_tokenizer(TEXTS, 120, path)
    return path


@dataclasses.dataclass
class Backbone:
    manifest: Path
    checkpoint: Path
    public: Path
    work: Path
    history: HeldOutHistory

    def publishing(self) -> CheckpointPublishing:
        plain = CheckpointPublishing(self.public, KEY, PROJECT)
        return with_model_export(
            plain,
            load_manifest(self.manifest),
            self.manifest,
            data_base=None,
            history=self.history,
            scratch=self.work,
        )


@pytest.fixture
def backbone(tmp_path: Path, tokenizer_file: Path) -> Backbone:
    folder = tmp_path / "project"
    folder.mkdir()
    manifest = folder / "project.toml"
    manifest.write_text(manifest_text())
    shutil.copy(tokenizer_file, folder / "tokenizer.json")
    checkpoint = save(trained(manifest), tmp_path / "checkpoints", epoch=EPOCH)
    history = HeldOutHistory()
    history.record(evaluation(EPOCH - 2, 4.25, accuracy=0.125))
    history.record(evaluation(EPOCH + 3, 1.0))  # after the checkpoint: not its figures
    return Backbone(manifest, checkpoint, tmp_path / "public", tmp_path / "work", history)


def test_the_model_is_published_beside_its_checkpoint(backbone: Backbone, tmp_path: Path) -> None:
    publishing = backbone.publishing()
    assert publishing.beside is not None
    checkpoint_index = publishing.publish(backbone.checkpoint, EPOCH, 3.5)
    public = backbone.public
    assert sorted(p.name for p in public.iterdir()) == sorted(
        [INDEX_NAME, checkpoint_index.file, MODEL_INDEX, "model-00000007.zip"]
    )
    index = ModelIndex.from_json(json.loads((public / MODEL_INDEX).read_text()), "model.json")
    index.check(PROJECT, KEY.peer_id, "model.json")
    index.check_file(public / index.file)
    assert (index.epoch, index.architecture) == (EPOCH, "AlbertForMaskedLM")
    assert index.held_out == HeldOut(EPOCH - 2, 4.25, 0.125, 64)
    assert list(backbone.work.iterdir()) == []  # the export's scratch folder is gone

    unpacked = tmp_path / "download"
    with zipfile.ZipFile(public / index.file) as packed:
        packed.extractall(unpacked)
    folder = unpacked / index.folder
    assert {p.name for p in folder.iterdir()} == WEIGHTS_FILES
    card = (folder / "README.md").read_text()
    assert "loss 4.2500" in card
    assert "12.50%" in card
    assert f"epoch {EPOCH - 2}" in card
    assert f'from_pretrained("{index.folder}")' in card

    # the page's lines load it
    transformers = pytest.importorskip("transformers")
    auto = getattr(transformers, index.auto_class)
    model = auto.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tokenizer("the quick brown fox", return_tensors="pt")
    with torch.no_grad():
        logits = model(**ids).logits
    assert logits.shape[-1] == model.config.vocab_size


def test_a_failed_export_is_logged_and_the_checkpoint_still_published(
    backbone: Backbone, caplog: pytest.LogCaptureFixture
) -> None:
    (backbone.manifest.parent / "tokenizer.json").unlink()
    publishing = backbone.publishing()
    with caplog.at_level(logging.WARNING, logger="core.training.publish.checkpoint"):
        index = publishing.publish(backbone.checkpoint, EPOCH, 3.5)
    assert sorted(p.name for p in backbone.public.iterdir()) == sorted([INDEX_NAME, index.file])
    assert "the model of epoch 7 was not published" in caplog.text
    assert "tokenizer" in caplog.text

    # an unexpected error too: logged with its trace, the checkpoint published all the same
    def broken(checkpoint: Path, published: Any) -> None:
        raise RuntimeError("torch fell over")

    publishing = dataclasses.replace(publishing, beside=broken)
    with caplog.at_level(logging.WARNING, logger="core.training.publish.checkpoint"):
        publishing.publish(backbone.checkpoint, EPOCH + 1, 3.0)
    assert "torch fell over" in caplog.text
    assert json.loads((backbone.public / INDEX_NAME).read_text())["epoch"] == EPOCH + 1


def test_a_kind_that_cannot_be_exported_publishes_checkpoints_only(
    backbone: Backbone, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core.export.kinds, "MAPPINGS", MappingProxyType({}))
    publishing = backbone.publishing()
    assert publishing.beside is None
    publishing.publish(backbone.checkpoint, EPOCH, 3.5)
    assert not (backbone.public / MODEL_INDEX).exists()
