"""The unigram floor: what a model that only counts tokens scores on the held-out set.

A model that has learned nothing about context can still learn how often each token occurs, and
predicting those frequencies everywhere scores the unigram cross-entropy. On the demo's held-out
shard that is about 6.2 nats against ln(4096) = 8.3 for a uniform guess, so a curve that falls from
8.3 to 6.3 has learned almost nothing a word count would not know. Every held-out figure is shown
beside this floor so that "below the floor" means the model uses context (``below_floor``, in
``core.util.amounts`` so that what shows the figures needs no torch, words a loss beside it).

The frequencies come from the training shards (never the held-out ones), read in file order, one
shard of each source in turn, until ``FLOOR_TOKENS`` target tokens are counted: the tokens the
model is asked to predict there, packed exactly as training packs them (every ordinary token for a
masked model, every next token for a causal one, [SEP] included). Each count gets one more
(Laplace): a token the sample never showed costs a finite amount, as it would to a real model.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence

import torch

from core.data import DataSource, TextTokenizer
from core.data.batches import IGNORE_INDEX, packed_sequences
from core.data.errors import DataError
from core.data.readers import read_shard
from core.project import Manifest
from core.training.evaluation.held_out import HeldOutSet, is_causal

FLOOR_TOKENS = 2_000_000
"""Target tokens counted: a few seconds of tokenizing; rare tokens barely move the mean."""


def token_counts(
    texts: Iterable[str],
    tokenizer: TextTokenizer,
    *,
    seq_len: int,
    causal: bool,
    limit: int = FLOOR_TOKENS,
) -> torch.Tensor:
    """How often each id is a prediction target in ``texts`` packed into ``seq_len`` sequences,
    up to ``limit`` targets: int64 of [vocab_size]."""
    counts = torch.zeros(tokenizer.vocab_size, dtype=torch.int64)
    specials = torch.tensor(sorted(tokenizer.special_ids), dtype=torch.int64)
    counted = 0
    for sequence in packed_sequences(texts, tokenizer, seq_len):
        ids = torch.tensor(sequence, dtype=torch.int64)
        # the targets evaluation scores: a causal model never predicts the first id, a masked one
        # only ordinary tokens
        targets = (
            ids[1:][ids[1:] != tokenizer.pad_id] if causal else ids[~torch.isin(ids, specials)]
        )
        targets = targets[: limit - counted]
        counts += torch.bincount(targets, minlength=tokenizer.vocab_size)
        counted += len(targets)
        if counted >= limit:
            break
    return counts


def unigram_floor(counts: torch.Tensor, held_out: HeldOutSet) -> float:
    """Cross-entropy per predicted token of the held-out set under the add-one frequencies of
    ``counts``; ``DataError`` when the set predicts no token."""
    log_p = torch.log((counts.double() + 1) / (counts.sum().double() + len(counts)))
    total = 0.0
    tokens = 0
    for batch in held_out.batches:
        labels = batch["labels"][:, 1:] if held_out.causal else batch["labels"]
        scored = labels[labels != IGNORE_INDEX]
        total -= float(log_p[scored].sum())
        tokens += len(scored)
    if not tokens:
        raise DataError("the held-out set has no token to predict")
    return total / tokens


def training_texts(manifest: Manifest, *, data_base: str | None) -> Iterator[str]:
    """The training shards' texts in file order, one shard of each source in turn."""
    sources = [
        DataSource(
            tuple(manifest.resolve_url(u, data_base=data_base) for u in s.urls),
            format=s.format,
            text_field=s.text_field,
        )
        for s in manifest.data.sources
    ]
    shards = [[(url, s) for url in s.urls] for s in sources]
    for url, source in _alternate(shards):
        for text in read_shard(url, fmt=source.format_of(url), text_field=source.text_field):
            if text:
                yield text


def project_floor(
    manifest: Manifest, tokenizer: TextTokenizer, held_out: HeldOutSet, *, data_base: str | None
) -> float:
    """The project's unigram floor on ``held_out``. Reads the training shards (disk or network):
    call it from a worker thread."""
    counts = token_counts(
        training_texts(manifest, data_base=data_base),
        tokenizer,
        seq_len=manifest.data.seq_len,
        causal=is_causal(manifest),
    )
    if not int(counts.sum()):
        raise DataError("the training shards hold no text to count tokens in")
    floor = unigram_floor(counts, held_out)
    if not math.isfinite(floor):
        raise DataError("the unigram floor is not finite")
    return floor


def _alternate(lists: Sequence[list[tuple[str, DataSource]]]) -> Iterator[tuple[str, DataSource]]:
    for row in itertools.zip_longest(*lists):
        yield from (item for item in row if item is not None)
