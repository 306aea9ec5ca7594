"""The held-out sequences a project is measured on: the same ones at every evaluation.

The shards named in ``[evaluation] urls`` are read once, in file order (no shuffling: a shuffle
would measure different text each time and make the curve noisy), until ``samples`` sequences of
``data.seq_len`` tokens are packed or the text ends. Masked models see the masks drawn from a fixed
seed, so two evaluations of the same weights give the same figures to the last bit. The whole set
stays in memory: at most 65536 sequences (``MAX_EVALUATION_SAMPLES``), ids as int64.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from core.data import DataSource, TextTokenizer, clm_batches, mlm_batches
from core.data.errors import DataError
from core.data.readers import read_shard
from core.project import Manifest

EVALUATION_SEED = 0x6576616C
"""Draws the masks: fixed, so that every evaluation masks the same positions."""
CAUSAL_KINDS = ("llama-clm",)
"""Model kinds that predict the next token (the others predict masked ones)."""

Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class HeldOutSet:
    batches: tuple[Batch, ...]
    samples: int
    """Sequences in ``batches``: ``[evaluation] samples``, or fewer when the text ran out."""
    causal: bool


def is_causal(manifest: Manifest) -> bool:
    return manifest.model.kind in CAUSAL_KINDS


def load_held_out(
    manifest: Manifest, tokenizer: TextTokenizer, *, data_base: str | None
) -> HeldOutSet:
    """The project's held-out set; ``DataError`` naming the shard that cannot be read, or saying
    that the shards hold no text. Blocks on disk or network: call it from a worker thread."""
    e = manifest.evaluation
    if not e.enabled:
        raise DataError("the manifest names no held-out data ([evaluation] urls)")
    source = DataSource(
        tuple(manifest.resolve_url(u, data_base=data_base) for u in e.urls),
        format=e.format,
        text_field=e.text_field,
    )
    batch_size = min(e.samples, manifest.training.microbatch_size)
    causal = is_causal(manifest)
    texts = _in_order(source)
    if causal:
        made = clm_batches(
            texts, tokenizer, seq_len=manifest.data.seq_len, batch_size=1, seed=EVALUATION_SEED
        )
    else:
        made = mlm_batches(
            texts,
            tokenizer,
            seq_len=manifest.data.seq_len,
            batch_size=1,
            mask_prob=manifest.data.mask_prob,
            seed=EVALUATION_SEED,
        )
    # one sequence per batch from the packer, regrouped here: the last group may be short, where
    # the packer would drop an incomplete batch and lose held-out text
    singles = list(itertools.islice(made, e.samples))
    if not singles:
        raise DataError(f"the held-out shards hold no text: {', '.join(source.urls)}")
    batches = tuple(
        {key: torch.cat([s[key] for s in singles[i : i + batch_size]]) for key in singles[0]}
        for i in range(0, len(singles), batch_size)
    )
    return HeldOutSet(batches, len(singles), causal)


def _in_order(source: DataSource) -> Iterator[str]:
    for url in source.urls:
        for text in read_shard(url, fmt=source.format_of(url), text_field=source.text_field):
            if text:
                yield text
