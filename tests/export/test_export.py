"""``export_model``: what transformers loads from the folder computes what our model computes, and
every export that cannot be right is refused before anything is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from core.data import ShardServerThread
from core.export.errors import ExportError
from core.export.folder import WEIGHTS, Exported, export_model
from core.export.kinds import MAPPINGS, mapping_for
from core.export.records import Evaluated, HeldOutFigures, NotEvaluated
from core.project import ManifestError
from core.project.sections import MODEL_KINDS
from core.training.checkpoints import CheckpointStore
from core.util.errors import BarnraiseError
from tests.export.conftest import (
    EPOCH,
    SAMPLES,
    Project,
    epoch_line,
    held_out,
    manifest_text,
    save,
    trained,
    write_lines,
)

ROOT = Path(__file__).resolve().parents[2]
DMOE_DEMO = ROOT / "resources" / "dmoe-demo" / "project.toml"
SENTENCE = "The quick brown fox jumps over the lazy dog"
FILES = {
    "README.md",
    "config.json",
    WEIGHTS,
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
}


def test_transformers_computes_the_same_logits(project: Project, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "model"
    exported = export_model(project.manifest, project.checkpoint, out)
    assert exported.folder == out
    assert exported.epoch == EPOCH
    assert {name for name, _ in exported.files} == FILES
    assert {path.name for path in out.iterdir()} == FILES

    loaded, info = transformers.AlbertForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    loaded.eval()
    sentence = [project.tokenizer.cls_id, *project.tokenizer.encode(SENTENCE)]
    sentence.append(project.tokenizer.sep_id)
    ids = torch.tensor([sentence, list(range(5, 5 + len(sentence)))])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        ours = project.model(ids, mask).logits
        theirs = loaded(input_ids=ids, attention_mask=mask).logits
    assert theirs.shape == ours.shape
    assert (theirs - ours).abs().max().item() <= 1e-5
    # the class the model card loads it with
    auto = transformers.AutoModelForMaskedLM.from_pretrained(out)
    assert isinstance(auto, transformers.AlbertForMaskedLM)


def test_transformers_tokenizes_as_the_project_does(project: Project, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "model"
    export_model(project.manifest, project.checkpoint, out)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    ids = project.tokenizer.encode(SENTENCE)
    assert tokenizer(SENTENCE, add_special_tokens=False)["input_ids"] == ids
    # as in training, each text between [CLS] and [SEP]
    wrapped = [project.tokenizer.cls_id, *ids, project.tokenizer.sep_id]
    assert tokenizer(SENTENCE)["input_ids"] == wrapped
    assert tokenizer.mask_token_id == project.tokenizer.mask_id
    assert tokenizer.pad_token_id == project.tokenizer.pad_id
    assert tokenizer.bos_token_id == project.tokenizer.cls_id
    assert tokenizer.eos_token_id == project.tokenizer.sep_id
    assert tokenizer.model_max_length == 32


def test_the_files_say_what_the_model_is(project: Project, tmp_path: Path) -> None:
    out = tmp_path / "model"
    exported = export_model(project.manifest, project.checkpoint, out)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "albert"
    assert config["architectures"] == ["AlbertForMaskedLM"]
    assert config["hidden_act"] == "gelu"
    assert (config["num_hidden_layers"], config["num_hidden_groups"]) == (3, 1)
    with safe_open(str(out / WEIGHTS), framework="pt") as weights:
        assert weights.metadata() == {"format": "pt"}
        token_types = weights.get_tensor("albert.embeddings.token_type_embeddings.weight")
        assert not token_types.any()
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\npipeline_tag: fill-mask\n")
    for text in ("# tiny-export", "A tiny model to export.", "shards/shard-00000.jsonl.gz"):
        assert text in card
    # a checkpoint that does not record the samples behind it: its last epoch's own are never
    # shown as those
    assert f"epoch {EPOCH}, which does not record how many samples came before it" in card
    assert f"{SAMPLES:,}" not in card
    assert "Not evaluated: no held-out figures were given for this export." in card
    assert "loads as `AlbertForMaskedLM`" in card
    assert 'model = AutoModelForMaskedLM.from_pretrained("model")' in card
    assert "generate" not in card
    assert len(exported.sha256) == 64


def card_of(
    project: Project, out: Path, epoch: int, *, evaluation: HeldOutFigures | None = None
) -> tuple[str, Exported]:
    """The card of the project's model exported from a checkpoint of ``epoch`` in its backbone's
    folder (``aux``), whose logs it reads."""
    checkpoint = save(project.model, project.checkpoints, epoch, samples_total=256 * epoch)
    exported = export_model(
        project.manifest,
        checkpoint,
        out,
        backbone_dir=project.checkpoints.parent,
        evaluation=evaluation,
    )
    return (out / "README.md").read_text(), exported


def test_the_card_gives_the_samples_behind_the_checkpoint(project: Project, tmp_path: Path) -> None:
    # 110 epochs of 256 samples; the last epoch's own (288: the trainers overshot the target) is
    # what the checkpoint's ``samples`` says, and the card never shows it
    checkpoint = save(project.model, project.checkpoints, 110, samples_total=28_160)
    assert CheckpointStore.load(checkpoint).metadata["samples"] == SAMPLES
    exported = export_model(project.manifest, checkpoint, tmp_path / "m")
    card = (tmp_path / "m" / "README.md").read_text()
    assert "checkpoint of epoch 110, after 28,160 samples in all" in card
    assert f"{SAMPLES:,}" not in card
    assert exported.samples == 28_160


def test_the_card_gives_the_held_out_figures_of_its_epoch(project: Project, tmp_path: Path) -> None:
    write_lines(
        project.checkpoints.parent / "evaluation.jsonl",
        [
            held_out(100, 5.9),
            '{"epoch": 105, "loss": 5.8, "accura',  # a crash mid-write
            held_out(110, 5.7312),
            {"epoch": "110", "loss": 1.0},  # not an evaluation
            held_out(112, None),  # a loss that was not finite: nothing to show
            held_out(120, 5.1),  # after the checkpoint: not its figures
        ],
    )
    card, exported = card_of(project, tmp_path / "m", 110)
    assert (
        "On 512 held-out sequences, never trained on, measured at its epoch 110: loss 5.7312 nats "
        "per masked token, 0.51 below the unigram floor of 6.24 nats (what a model that only "
        "counts how often each token occurs scores); accuracy 41.25% of masked tokens."
    ) in card
    assert "5.1000" not in card
    assert isinstance(exported.evaluation, Evaluated)
    assert exported.evaluation.skipped == 2
    assert exported.evaluation.log == project.checkpoints.parent / "evaluation.jsonl"

    # between two evaluations: the newest before it, said to be that
    card, _ = card_of(project, tmp_path / "n", 115)
    assert (
        "measured at epoch 110, the newest evaluation before this checkpoint: loss 5.7312" in card
    )
    # before the first: none, and why
    card, exported = card_of(project, tmp_path / "o", 99)
    assert "Not evaluated: no held-out evaluation was logged at or before epoch 99." in card
    assert isinstance(exported.evaluation, NotEvaluated)


def test_an_evaluation_without_a_floor_shows_the_loss_alone(
    project: Project, tmp_path: Path
) -> None:
    write_lines(project.checkpoints.parent / "evaluation.jsonl", [held_out(110, 5.7312, None)])
    card, _ = card_of(project, tmp_path / "m", 110)
    assert "loss 5.7312 nats per masked token; accuracy 41.25% of masked tokens." in card
    assert "floor" not in card
    # a loss above the floor says so
    write_lines(project.checkpoints.parent / "evaluation.jsonl", [held_out(110, 6.5)])
    card, _ = card_of(project, tmp_path / "n", 110)
    assert "loss 6.5000 nats per masked token, 0.26 above the unigram floor of 6.24 nats" in card


def test_a_missing_or_damaged_log_leaves_the_card_unevaluated(
    project: Project, tmp_path: Path
) -> None:
    card, exported = card_of(project, tmp_path / "m", 110)
    assert "Not evaluated: the collaboration's backbone logged no held-out evaluation." in card
    assert isinstance(exported.evaluation, NotEvaluated)
    assert exported.evaluation.log == project.checkpoints.parent / "evaluation.jsonl"
    assert str(tmp_path) not in card  # the card is published: it names no local path
    assert exported.contributors is None
    assert "contributed" not in card

    write_lines(project.checkpoints.parent / "evaluation.jsonl", ["garbage", "[1, 2]", "{}"])
    card, _ = card_of(project, tmp_path / "n", 110)
    assert "Not evaluated: no held-out evaluation was logged at or before epoch 110." in card
    assert (tmp_path / "n" / "model.safetensors").is_file()  # the export itself goes on


def test_figures_given_by_the_caller_stand_in_for_a_log_without_any(
    project: Project, tmp_path: Path
) -> None:
    given = HeldOutFigures(6, 2.5, 0.4125, 1000)
    export_model(project.manifest, project.checkpoint, tmp_path / "m", evaluation=given)
    card = (tmp_path / "m" / "README.md").read_text()
    assert "On 1,000 held-out sequences, never trained on, measured at epoch 6, the newest" in card
    assert "loss 2.5000 nats per masked token; accuracy 41.25% of masked tokens" in card
    # the log's, when it has some: it carries the floor
    write_lines(project.checkpoints.parent / "evaluation.jsonl", [held_out(110, 5.7312)])
    card, _ = card_of(project, tmp_path / "n", 110, evaluation=given)
    assert "loss 5.7312 nats per masked token, 0.51 below the unigram floor" in card


def test_the_card_counts_the_contributors_before_its_epoch(
    project: Project, tmp_path: Path
) -> None:
    metrics = project.checkpoints.parent / "metrics.jsonl"
    write_lines(
        metrics,
        [
            epoch_line(0, {"peer-a": 200, "peer-b": 88}),
            *(epoch_line(e, {"peer-a": 128, "peer-b": 160}) for e in range(1, 110)),
            "not json",
            epoch_line(40, {"peer-c": 32}, late=True),  # found after its epoch went out
            epoch_line(50, {"peer-d": 64}),
            epoch_line(50, {"peer-d": 64}, withdrawn=True),  # caught faking work: no credit
            epoch_line(110, {"peer-e": 256}),  # the checkpoint's own epoch: after its weights
        ],
    )
    card, exported = card_of(project, tmp_path / "m", 110)
    assert " 3 peer(s) contributed to it (an open project counts computers, not people)." in card
    assert exported.contributors is not None
    assert (exported.contributors.count, exported.contributors.complete) == (3, True)
    assert exported.contributors.skipped == 1

    # a log that no longer reaches the first epoch (rotated away) gives a lower bound
    write_lines(metrics, [epoch_line(e, {"peer-a": 256}) for e in range(60, 110)])
    card, _ = card_of(project, tmp_path / "n", 110)
    assert " at least 1 peer(s) contributed to it" in card


def test_the_newest_checkpoint_of_a_folder(project: Project, tmp_path: Path) -> None:
    later = trained(project.manifest)
    with torch.no_grad():
        later.decoder.bias.add_(1.0)
    save(later, project.checkpoints, epoch=EPOCH + 10)
    exported = export_model(project.manifest, None, tmp_path / "m", checkpoints=project.checkpoints)
    assert exported.epoch == EPOCH + 10
    with safe_open(str(tmp_path / "m" / WEIGHTS), framework="pt") as weights:
        assert torch.equal(weights.get_tensor("predictions.bias"), later.decoder.bias)


def test_a_checkpoint_or_a_folder_of_them_is_needed(project: Project, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="name the checkpoint"):
        export_model(project.manifest, None, tmp_path / "m")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ExportError, match="holds no checkpoint"):
        export_model(project.manifest, None, tmp_path / "m", checkpoints=empty)
    assert not (tmp_path / "m").exists()


def test_a_checkpoint_of_another_model_is_refused(project: Project, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "project.toml").write_text(manifest_text(hidden=48))
    checkpoint = save(trained(other / "project.toml"), other / "checkpoints")
    with pytest.raises(ExportError) as caught:
        export_model(project.manifest, checkpoint, tmp_path / "m")
    message = str(caught.value)
    assert str(checkpoint) in message
    assert "embedding_to_hidden.weight (48, 16) where the model has (32, 16)" in message
    assert not (tmp_path / "m").exists()


def test_a_checkpoint_that_lacks_a_tensor_is_refused(project: Project, tmp_path: Path) -> None:
    state = project.model.state_dict()
    del state["head_norm.bias"]
    state["extra.weight"] = torch.zeros(2)
    path = CheckpointStore(tmp_path / "ckpt").save(1, state, {}, {}, loss=None)
    assert path is not None
    with pytest.raises(ExportError, match=r"lacks head_norm\.bias.*has extra\.weight"):
        export_model(project.manifest, path, tmp_path / "m")


def test_a_tokenizer_served_over_http(project: Project, tmp_path: Path) -> None:
    served = tmp_path / "www"
    served.mkdir()
    (project.folder / "tokenizer.json").rename(served / "tokenizer.json")
    with ShardServerThread(served) as server:
        export_model(project.manifest, project.checkpoint, tmp_path / "m", data_base=server.url)
    written = json.loads((tmp_path / "m" / "tokenizer.json").read_text())
    original = json.loads((served / "tokenizer.json").read_text())
    assert written["model"]["vocab"] == original["model"]["vocab"]
    missing = tmp_path / "nothing"
    missing.mkdir()
    with (
        ShardServerThread(missing) as server,
        pytest.raises(ExportError, match=r"tokenizer .*/tokenizer\.json cannot be downloaded"),
    ):
        export_model(project.manifest, project.checkpoint, tmp_path / "n", data_base=server.url)


def test_a_missing_tokenizer_is_refused(project: Project, tmp_path: Path) -> None:
    (project.folder / "tokenizer.json").unlink()
    with pytest.raises(
        ExportError, match=r"tokenizer .*tokenizer\.json \(data\.tokenizer\) is missing"
    ):
        export_model(project.manifest, project.checkpoint, tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_a_tokenizer_larger_than_the_embeddings_is_refused(
    project: Project, tmp_path: Path
) -> None:
    small = tmp_path / "small"
    small.mkdir()
    shutil.copy(project.folder / "tokenizer.json", small / "tokenizer.json")
    (small / "project.toml").write_text(manifest_text(vocab=100))
    checkpoint = save(trained(small / "project.toml"), small / "checkpoints")
    with pytest.raises(ExportError, match=r"has 1\d\d tokens but the model .* has 100 embedding"):
        export_model(small / "project.toml", checkpoint, tmp_path / "m")


def test_a_dmoe_project_has_no_single_model(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"dmoe project.*no single model"):
        export_model(DMOE_DEMO, None, tmp_path / "m")


def test_every_model_kind_has_a_mapping() -> None:
    assert set(MODEL_KINDS) <= set(MAPPINGS)
    assert mapping_for("albert-mlm").architecture == "AlbertForMaskedLM"
    assert mapping_for("llama-clm").architecture == "LlamaForCausalLM"
    with pytest.raises(
        ExportError, match=r"'bert-mlm' cannot be exported yet.*albert-mlm, llama-clm"
    ):
        mapping_for("bert-mlm")


def test_a_broken_manifest_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "project.toml"
    bad.write_text("[project]\nname = 'x'\n[model]\nvocab_size = -1\n")
    with pytest.raises(ManifestError):
        export_model(bad, None, tmp_path / "m")


def test_a_folder_that_holds_anything_is_kept(project: Project, tmp_path: Path) -> None:
    out = tmp_path / "model"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match=r"not empty.*--overwrite"):
        export_model(project.manifest, project.checkpoint, out)
    assert [path.name for path in out.iterdir()] == ["notes.txt"]
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []

    exported = export_model(project.manifest, project.checkpoint, out, overwrite=True)
    assert {path.name for path in out.iterdir()} == FILES
    assert exported.folder == out
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []


def test_an_empty_folder_is_filled(project: Project, tmp_path: Path) -> None:
    out = tmp_path / "model"
    out.mkdir()
    export_model(project.manifest, project.checkpoint, out)
    assert {path.name for path in out.iterdir()} == FILES


def test_export_errors_are_barnraise_errors() -> None:
    assert issubclass(ExportError, BarnraiseError)
