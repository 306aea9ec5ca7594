"""Language-model batches from a stream of texts: ``mlm_batches`` (masked) and ``clm_batches``
(causal).

Texts are tokenized as they arrive and packed into sequences of ``seq_len`` ids: each sequence starts
with [CLS] and each text ends with [SEP]. A text that does not fit in what is left of a sequence
starts the next one (the rest is [PAD]), unless it is longer than a whole sequence: then it is cut
across as many sequences as it needs.

Masking follows BERT: each real token is selected with probability ``mask_prob``; a selected token
becomes [MASK] 80 % of the time, a random ordinary token 10 %, and stays itself 10 %. The model must
predict the original token at every selected position (``labels``; -100 elsewhere, which PyTorch's
cross-entropy ignores). Special tokens and padding are never selected.

A causal model predicts every next token, so its batches are the packed sequences unmasked: the
labels are the ids themselves, with padding labelled -100 (the model shifts them by one). [CLS]
and [SEP] serve it as the start and end of text marks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

from core.data.errors import DataError
from core.data.tokenizer import TextTokenizer

IGNORE_INDEX = -100  # the label of positions that carry no prediction target
_ENCODE_AT_ONCE = 64  # texts tokenized per call: the library parallelises within a call


def mlm_batches(
    texts: Iterator[str],
    tokenizer: TextTokenizer,
    *,
    seq_len: int,
    batch_size: int,
    mask_prob: float = 0.15,
    seed: int = 0,
) -> Iterator[dict[str, torch.Tensor]]:
    """Yield ``input_ids``, ``attention_mask`` and ``labels``: int64 tensors of [batch_size, seq_len].

    Deterministic: the same texts, tokenizer and ``seed`` give the same batches. Ends when ``texts``
    ends (a last, incomplete batch is dropped); an endless stream gives endless batches.
    """
    if seq_len < 2:
        raise DataError(f"seq_len must be at least 2 ([CLS] and one token), got {seq_len}")
    if batch_size < 1:
        raise DataError(f"batch_size must be at least 1, got {batch_size}")
    if not 0.0 < mask_prob < 1.0:
        raise DataError(f"mask_prob must be between 0 and 1, got {mask_prob}")
    return _batches(
        texts, tokenizer, seq_len=seq_len, batch_size=batch_size, mask_prob=mask_prob, seed=seed
    )


def _batches(
    texts: Iterator[str],
    tokenizer: TextTokenizer,
    *,
    seq_len: int,
    batch_size: int,
    mask_prob: float,
    seed: int,
) -> Iterator[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    specials = torch.tensor(sorted(tokenizer.special_ids), dtype=torch.int64)
    # Random replacements are drawn from the ordinary tokens only.
    ordinary = torch.tensor(
        [i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids],
        dtype=torch.int64,
    )
    if len(ordinary) == 0:
        raise DataError("the tokenizer has no ordinary tokens to train on")
    rows: list[list[int]] = []
    for sequence in packed_sequences(texts, tokenizer, seq_len):
        rows.append(sequence)
        if len(rows) == batch_size:
            input_ids = torch.tensor(rows, dtype=torch.int64)
            rows = []
            yield _mask(
                input_ids,
                tokenizer,
                specials=specials,
                ordinary=ordinary,
                mask_prob=mask_prob,
                generator=generator,
            )


def clm_batches(
    texts: Iterator[str],
    tokenizer: TextTokenizer,
    *,
    seq_len: int,
    batch_size: int,
    seed: int = 0,
) -> Iterator[dict[str, torch.Tensor]]:
    """Yield ``input_ids``, ``attention_mask`` and ``labels``, int64 tensors of
    [batch_size, seq_len], packed as ``mlm_batches`` packs them.

    ``seed`` draws nothing (there is no masking); it is taken so that both kinds of batches are
    asked for alike. Ends when ``texts`` ends (a last, incomplete batch is dropped).
    """
    del seed  # the packing is deterministic by itself
    if seq_len < 2:
        raise DataError(f"seq_len must be at least 2 ([CLS] and one token), got {seq_len}")
    if batch_size < 1:
        raise DataError(f"batch_size must be at least 1, got {batch_size}")
    return _causal_batches(texts, tokenizer, seq_len=seq_len, batch_size=batch_size)


def _causal_batches(
    texts: Iterator[str], tokenizer: TextTokenizer, *, seq_len: int, batch_size: int
) -> Iterator[dict[str, torch.Tensor]]:
    rows: list[list[int]] = []
    for sequence in packed_sequences(texts, tokenizer, seq_len):
        rows.append(sequence)
        if len(rows) == batch_size:
            input_ids = torch.tensor(rows, dtype=torch.int64)
            rows = []
            real = input_ids != tokenizer.pad_id
            labels = torch.where(real, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
            yield {
                "input_ids": input_ids,
                "attention_mask": real.to(torch.int64),
                "labels": labels,
            }


def pack_sequences(
    token_lists: Iterable[list[int]], tokenizer: TextTokenizer, seq_len: int
) -> Iterator[list[int]]:
    """Pack tokenized texts into [CLS] t1 [SEP] t2 [SEP] ... sequences of exactly ``seq_len`` ids."""
    current = [tokenizer.cls_id]
    for ids in token_lists:
        if not ids:
            continue
        piece = [*ids, tokenizer.sep_id]
        while piece:
            room = seq_len - len(current)
            if len(piece) <= room:
                current.extend(piece)
                piece = []
            elif len(current) > 1 and len(piece) <= seq_len - 1:
                # Fits in a fresh sequence: keep the text whole rather than cut it.
                yield current + [tokenizer.pad_id] * room
                current = [tokenizer.cls_id]
            else:
                current.extend(piece[:room])
                piece = piece[room:]
                yield current
                current = [tokenizer.cls_id]
        if len(current) == seq_len:
            yield current
            current = [tokenizer.cls_id]


def packed_sequences(
    texts: Iterable[str], tokenizer: TextTokenizer, seq_len: int
) -> Iterator[list[int]]:
    """``texts`` tokenized as they arrive and packed as the batches pack them (``pack_sequences``)."""
    return pack_sequences(_token_lists(texts, tokenizer), tokenizer, seq_len)


def _token_lists(texts: Iterable[str], tokenizer: TextTokenizer) -> Iterator[list[int]]:
    group: list[str] = []
    for text in texts:
        group.append(text)
        if len(group) == _ENCODE_AT_ONCE:
            yield from tokenizer.encode_batch(group)
            group = []
    if group:
        yield from tokenizer.encode_batch(group)


def _mask(
    input_ids: torch.Tensor,
    tokenizer: TextTokenizer,
    *,
    specials: torch.Tensor,
    ordinary: torch.Tensor,
    mask_prob: float,
    generator: torch.Generator,
) -> dict[str, torch.Tensor]:
    attention_mask = (input_ids != tokenizer.pad_id).to(torch.int64)
    eligible = ~torch.isin(input_ids, specials)
    chance = torch.rand(input_ids.shape, generator=generator)
    selected = eligible & (chance < mask_prob)
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    # One more draw decides what a selected token becomes: [MASK], a random token, or itself.
    fate = torch.rand(input_ids.shape, generator=generator)
    replacements = ordinary[torch.randint(len(ordinary), input_ids.shape, generator=generator)]
    masked = input_ids.clone()
    masked[selected & (fate < 0.8)] = tokenizer.mask_id
    to_random = selected & (fate >= 0.8) & (fate < 0.9)
    masked[to_random] = replacements[to_random]
    return {"input_ids": masked, "attention_mask": attention_mask, "labels": labels}
