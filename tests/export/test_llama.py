"""``export_model`` of a ``llama-clm`` project: transformers' ``LlamaForCausalLM`` (and
``AutoModelForCausalLM``) loads the folder with nothing newly initialized and computes our logits,
tied or untied; the tokenizer leaves a text open for the model to continue, and the card names the
causal task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

from core.export.errors import ExportError
from core.export.folder import WEIGHTS, export_model
from core.export.records import HeldOutFigures
from core.training.checkpoints import CheckpointStore
from tests.export.conftest import EPOCH, ROPE_THETA, LlamaProject

SENTENCE = "The quick brown fox jumps over the lazy dog"


def loaded(transformers: Any, cls: Any, folder: Path) -> Any:
    """``cls.from_pretrained(folder)``, once transformers reports nothing missing, unexpected or
    of another shape (a weight it would initialize itself)."""
    model, info = cls.from_pretrained(folder, output_loading_info=True)
    assert isinstance(model, transformers.LlamaForCausalLM)
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    return model.eval()


def test_transformers_computes_the_same_logits(llama_project: LlamaProject, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    p = llama_project
    out = tmp_path / "model"
    exported = export_model(p.manifest, p.checkpoint, out)
    assert exported.epoch == EPOCH
    ids = [p.tokenizer.cls_id, *p.tokenizer.encode(SENTENCE)]
    batch = torch.tensor([ids, list(range(5, 5 + len(ids)))])
    mask = torch.ones_like(batch)
    mask[1, -3:] = 0  # padding after a text: positions stay as they are in both models
    real = mask.bool()
    with torch.no_grad():
        ours = p.model(batch).logits
        ours_masked = p.model(batch, mask).logits
    for cls in (transformers.LlamaForCausalLM, transformers.AutoModelForCausalLM):
        theirs = loaded(transformers, cls, out)
        if p.tied:
            assert theirs.lm_head.weight is theirs.model.embed_tokens.weight
        else:
            assert theirs.lm_head.weight is not theirs.model.embed_tokens.weight
        with torch.no_grad():
            logits = theirs(input_ids=batch).logits
            masked = theirs(input_ids=batch, attention_mask=mask).logits
        assert logits.shape == ours.shape
        assert (logits - ours).abs().max().item() <= 1e-5
        assert (masked[real] - ours_masked[real]).abs().max().item() <= 1e-5


def test_the_read_out_is_written_as_transformers_saves_it(
    llama_project: LlamaProject, tmp_path: Path
) -> None:
    out = tmp_path / "model"
    export_model(llama_project.manifest, llama_project.checkpoint, out)
    with safe_open(str(out / WEIGHTS), framework="pt") as weights:
        names = set(weights.keys())
        embedding = weights.get_tensor("model.embed_tokens.weight")
    state = llama_project.model.state_dict()
    assert torch.equal(embedding, state["model.embed_tokens.weight"])
    if llama_project.tied:
        # as transformers saves a tied model: it ties the read-out to the embedding on loading
        assert names == set(state) - {"lm_head.weight"}
    else:
        assert names == set(state)


def test_the_files_say_what_the_model_is(llama_project: LlamaProject, tmp_path: Path) -> None:
    p = llama_project
    out = tmp_path / "model"
    evaluation = HeldOutFigures(EPOCH, 2.5, 0.4125, 100, floor=4.5)
    export_model(p.manifest, p.checkpoint, out, evaluation=evaluation)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["architectures"] == ["LlamaForCausalLM"]
    expected = {
        "vocab_size": 128,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "max_position_embeddings": 32,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": p.tied,
        "bos_token_id": p.tokenizer.cls_id,
        "eos_token_id": p.tokenizer.sep_id,
        "pad_token_id": p.tokenizer.pad_id,
        "dtype": "float32",
    }
    assert {key: config[key] for key in expected} == expected
    assert config["rope_parameters"] == {"rope_type": "default", "rope_theta": ROPE_THETA}
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\npipeline_tag: text-generation\n")
    assert "- llama\n" in card
    assert "loads as `LlamaForCausalLM`" in card
    assert "from transformers import AutoModelForCausalLM, AutoTokenizer" in card
    assert 'model = AutoModelForCausalLM.from_pretrained("model")' in card
    assert "model.generate(**inputs" in card
    assert "predict every next token" in card
    assert "loss 2.5000 nats per next token, 2.00 below the unigram floor of 4.50 nats" in card
    assert "accuracy 41.25% of next tokens" in card
    assert "masked" not in card
    tied = "a read-out that reuses the token embedding" in card
    assert tied == p.tied


def test_the_loaded_config_keeps_the_rotary_base(
    llama_project: LlamaProject, tmp_path: Path
) -> None:
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "model"
    export_model(llama_project.manifest, llama_project.checkpoint, out)
    config = transformers.AutoConfig.from_pretrained(out)
    assert config.rope_parameters["rope_theta"] == ROPE_THETA
    assert config.tie_word_embeddings is llama_project.tied


@pytest.mark.parametrize("llama_project", [True], ids=["tied"], indirect=True)
def test_the_tokenizer_leaves_a_text_open_and_generation_stops_at_sep(
    llama_project: LlamaProject, tmp_path: Path
) -> None:
    transformers = pytest.importorskip("transformers")
    p = llama_project
    out = tmp_path / "model"
    export_model(p.manifest, p.checkpoint, out)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    ids = p.tokenizer.encode(SENTENCE)
    assert tokenizer(SENTENCE, add_special_tokens=False)["input_ids"] == ids
    # as every training sequence begins; a [SEP] after it would say the text is over
    inputs = tokenizer(SENTENCE, return_tensors="pt")
    assert inputs["input_ids"].tolist() == [[p.tokenizer.cls_id, *ids]]
    assert set(inputs) == {"input_ids", "attention_mask"}
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (
        p.tokenizer.cls_id,
        p.tokenizer.sep_id,
    )
    assert tokenizer.pad_token_id == p.tokenizer.pad_id
    assert tokenizer.padding_side == "left"
    model = loaded(transformers, transformers.AutoModelForCausalLM, out)
    assert model.generation_config.eos_token_id == p.tokenizer.sep_id
    with torch.no_grad():
        generated = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert generated[0, : inputs["input_ids"].size(1)].tolist() == [p.tokenizer.cls_id, *ids]
    with torch.no_grad():
        first = p.model(inputs["input_ids"]).logits[0, -1].argmax().item()
    assert generated[0, inputs["input_ids"].size(1)].item() == first


@pytest.mark.parametrize("llama_project", [True], ids=["tied"], indirect=True)
def test_a_read_out_apart_from_a_tied_embedding_is_refused(
    llama_project: LlamaProject, tmp_path: Path
) -> None:
    state = {name: tensor.clone() for name, tensor in llama_project.model.state_dict().items()}
    state["lm_head.weight"].add_(1.0)
    path = CheckpointStore(tmp_path / "ckpt").save(1, state, {}, {}, loss=None)
    assert path is not None
    with pytest.raises(ExportError, match=r"read-out \(lm_head\.weight\) differs .*tie_embeddings"):
        export_model(llama_project.manifest, path, tmp_path / "m")
    assert not (tmp_path / "m").exists()
