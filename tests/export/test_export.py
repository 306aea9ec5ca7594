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
from core.export.folder import WEIGHTS, export_model
from core.export.kinds import MAPPINGS, mapping_for
from core.project import ManifestError
from core.project.sections import MODEL_KINDS
from core.training.checkpoints import CheckpointStore
from core.util.errors import BarnraiseError
from tests.export.conftest import EPOCH, SAMPLES, Project, manifest_text, save, trained

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
    assert f"epoch {EPOCH} (after {SAMPLES:,} samples)" in card
    assert "Not evaluated" in card
    assert "loads as `AlbertForMaskedLM`" in card
    assert 'model = AutoModelForMaskedLM.from_pretrained("model")' in card
    assert "generate" not in card
    assert len(exported.sha256) == 64


def test_the_card_gives_held_out_figures_and_contributors(project: Project, tmp_path: Path) -> None:
    out = tmp_path / "model"
    evaluation = {"loss": 2.5, "accuracy": 0.4125, "epoch": 6, "samples": 1000}
    export_model(project.manifest, project.checkpoint, out, evaluation=evaluation, contributors=12)
    card = (out / "README.md").read_text()
    assert "Not evaluated" not in card
    assert "loss 2.5000, accuracy 41.25% of masked tokens" in card
    assert "(measured at epoch 6, 1,000 samples)" in card
    assert "12 volunteer(s)" in card


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
