"""The project's tokenizer, as the model's folder carries it.

The file is the one every peer trains with (``data.tokenizer``: a path beside the manifest, or a
URL, downloaded here), checked as the peers check it and against the model's embedding rows: a
token past them has no embedding, so such a tokenizer is refused. A smaller vocabulary is fine
(the rest of the rows are never used, as with a small corpus).

What is written differs from the project's file in one thing: a post-processor that adds the
special tokens the way the model saw them in training (``core.data.batches`` packs [CLS] t1 [SEP]
t2 [SEP] ...), so that transformers' tokenizer and pipelines give it the same input. A masked model
gets each text whole, in [CLS] ... [SEP]; a causal model gets [CLS] and the text left open, for it
to continue (a closing [SEP] would tell it the text is over). The vocabulary, normalizer and
pre-tokenizer are the project's own, so the ids of a text are the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, processors

from core.data.errors import DataError
from core.data.sources import is_remote, local_location
from core.data.tokenizer import CLS, MASK, PAD, SEP, UNK, TextTokenizer, load_tokenizer
from core.export.errors import ExportError
from core.project import Manifest
from core.util.web_client import open_url

TIMEOUT = 30.0
"""Seconds to wait for the tokenizer's server (per read)."""
MAX_BYTES = 256 * 1024 * 1024
"""A tokenizer's JSON is megabytes; a larger download is not one."""
_CHUNK = 1 << 16


def project_tokenizer(
    manifest: Manifest, data_base: str | None, scratch: Path
) -> tuple[Path, TextTokenizer]:
    """The local file of the manifest's tokenizer (downloaded into ``scratch`` when it is a URL)
    and the tokenizer loaded from it."""
    where = manifest.resolve_url(manifest.data.tokenizer, data_base=data_base)
    try:
        if is_remote(where):
            path = _download(where, scratch / "project-tokenizer.json")
        else:
            path = Path(local_location(where))
        if not path.is_file():
            raise ExportError(
                f"the project's tokenizer {where} (data.tokenizer) is missing: the model cannot "
                "be used without it; put the file there, or pass --data-base where it is served"
            )
        tokenizer = load_tokenizer(path)
    except DataError as exc:
        raise ExportError(f"the project's tokenizer cannot be used: {exc}") from None
    rows = manifest.model.vocab_size
    if tokenizer.vocab_size > rows:
        raise ExportError(
            f"the tokenizer {where} has {tokenizer.vocab_size:,} tokens but the model "
            f"(model.vocab_size) has {rows:,} embedding rows: token ids past {rows - 1:,} would "
            "have no embedding"
        )
    return path, tokenizer


def _download(url: str, target: Path) -> Path:
    received = 0
    try:
        with open_url(url, timeout=TIMEOUT) as response, target.open("wb") as out:
            while chunk := response.read(_CHUNK):
                received += len(chunk)
                if received > MAX_BYTES:
                    raise ExportError(
                        f"{url} is larger than {MAX_BYTES >> 20} MiB: not a tokenizer"
                    )
                out.write(chunk)
    except OSError as exc:  # urllib's HTTP and connection errors are OSErrors
        raise ExportError(f"the project's tokenizer {url} cannot be downloaded: {exc}") from None
    return target


def write_tokenizer(
    source: Path, tokenizer: TextTokenizer, folder: Path, max_length: int, *, causal: bool
) -> None:
    """``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json`` in ``folder``,
    for a masked model, or a causal one (``causal``)."""
    try:
        wrapped = Tokenizer.from_file(str(source))
    except Exception as exc:  # the library raises plain Exception for a bad file
        raise ExportError(f"tokenizer file {source} cannot be read: {exc}") from None
    if causal:
        # a pair is two texts in a row, as packed in training; the second is left open
        single, pair = f"{CLS} $A", f"{CLS} $A {SEP} $B"
    else:
        single, pair = f"{CLS} $A {SEP}", f"{CLS} $A {SEP} $B:1 {SEP}:1"
    wrapped.post_processor = processors.TemplateProcessing(
        single=single,
        pair=pair,
        special_tokens=[(CLS, tokenizer.cls_id), (SEP, tokenizer.sep_id)],
    )
    wrapped.save(str(folder / "tokenizer.json"))
    special = special_tokens()
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "do_lower_case": lowercases(wrapped),
        "model_max_length": max_length,
        # a causal model continues the end of its input: batched prompts are padded before it
        "padding_side": "left" if causal else "right",
        # a causal model has no token types to take
        "model_input_names": (
            ["input_ids", "attention_mask"]
            if causal
            else ["input_ids", "token_type_ids", "attention_mask"]
        ),
        **special,
    }
    write_json(folder / "tokenizer_config.json", config)
    write_json(folder / "special_tokens_map.json", special)


def lowercases(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer's normalizer lowercases (as ``train_tokenizer``'s does); the fast
    tokenizer does it itself, the flag only tells readers of the folder."""
    normalizer = json.loads(tokenizer.to_str()).get("normalizer") or {}
    steps = normalizer.get("normalizers", [normalizer])
    return any(
        step.get("type") == "Lowercase"
        or (step.get("type") == "BertNormalizer" and step.get("lowercase", False))
        for step in steps
        if isinstance(step, dict)
    )


def special_tokens() -> dict[str, str]:
    """The special tokens under transformers' names for them."""
    return {
        "pad_token": PAD,
        "unk_token": UNK,
        "cls_token": CLS,
        "sep_token": SEP,
        "mask_token": MASK,
        # as config.json's ids: [CLS] opens every training sequence, [SEP] closes each text
        "bos_token": CLS,
        "eos_token": SEP,
    }


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
