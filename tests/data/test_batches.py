"""mlm_batches: packing, shapes, BERT masking rates and rules, determinism; clm_batches: the same
packing, unmasked, with next-token labels."""

from __future__ import annotations

import gzip
import itertools
import json

import pytest
import torch

from core.data import (
    DataError,
    TextTokenizer,
    clm_batches,
    mlm_batches,
    train_tokenizer,
    write_demo_corpus,
)
from core.data.batches import IGNORE_INDEX, pack_sequences


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    paths = write_demo_corpus(tmp_path_factory.mktemp("corpus"), shards=2, megabytes=0.3)
    return [json.loads(line)["text"] for p in paths for line in gzip.open(p, "rt")]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory, texts: list[str]) -> TextTokenizer:
    return train_tokenizer(texts, vocab_size=400, path=tmp_path_factory.mktemp("tok") / "t.json")


def test_packing_keeps_texts_whole_and_cuts_only_long_ones(tokenizer: TextTokenizer) -> None:
    cls, sep, pad = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id
    lists = [[10, 11, 12], [20, 21, 22, 23], [], list(range(30, 45)), [50]]
    rows = list(pack_sequences(lists, tokenizer, seq_len=8))
    assert rows == [
        [cls, 10, 11, 12, sep, pad, pad, pad],  # the next text (5 with [SEP]) does not fit
        [cls, 20, 21, 22, 23, sep, 30, 31],  # longer than a sequence: cut to fill the room
        [cls, *range(32, 39)],
        [cls, 39, 40, 41, 42, 43, 44, sep],
        # [50, sep] waits for more text; the stream ended, so it is never emitted
    ]


def test_shapes_dtypes_and_that_packing_loses_no_token(
    tokenizer: TextTokenizer, texts: list[str]
) -> None:
    sample = texts[:300]
    batches = list(mlm_batches(iter(sample), tokenizer, seq_len=64, batch_size=8, seed=1))
    assert len(batches) > 10
    for batch in batches:
        assert set(batch) == {"input_ids", "attention_mask", "labels"}
        for tensor in batch.values():
            assert tensor.dtype == torch.int64
            assert tensor.shape == (8, 64)
        assert set(batch["attention_mask"].unique().tolist()) <= {0, 1}
        assert (batch["input_ids"][:, 0] == tokenizer.cls_id).all()
        # Padding only at the end of a row, and exactly where the attention mask is 0.
        mask = batch["attention_mask"]
        assert (mask[:, 1:] <= mask[:, :-1]).all()
        assert ((batch["input_ids"] == tokenizer.pad_id) == (mask == 0)).all()
    # Every token of every text appears, in order, between the special tokens.
    originals = packed(sample, tokenizer, seq_len=64, batch_size=8)
    assert len(originals) == len(batches)
    flat = [i for i in originals.flatten().tolist() if i not in tokenizer.special_ids]
    expected = list(itertools.chain.from_iterable(tokenizer.encode_batch(sample)))
    assert flat == expected[: len(flat)]
    assert len(flat) > 0.9 * len(expected)


def packed(
    texts: list[str], tokenizer: TextTokenizer, seq_len: int, batch_size: int
) -> torch.Tensor:
    """The unmasked batches for ``texts``: [batches, batch_size, seq_len]."""
    rows = list(pack_sequences(tokenizer.encode_batch(texts), tokenizer, seq_len))
    rows = rows[: len(rows) // batch_size * batch_size]
    return torch.tensor(rows).view(-1, batch_size, seq_len)


def test_masking_rates_and_rules(tokenizer: TextTokenizer, texts: list[str]) -> None:
    sample = texts * 2
    batches = list(mlm_batches(iter(sample), tokenizer, seq_len=128, batch_size=16, seed=3))
    originals = packed(sample, tokenizer, seq_len=128, batch_size=16)
    assert len(batches) == len(originals) > 40
    specials = torch.tensor(sorted(tokenizer.special_ids))
    selected_total = eligible_total = masked = randomised = kept = 0
    for batch, unmasked in zip(batches, originals, strict=True):
        selected = batch["labels"] != IGNORE_INDEX
        eligible = ~torch.isin(unmasked, specials)
        # Never a special token or padding; labels hold the original token where selected.
        assert not (selected & ~eligible).any()
        assert (batch["labels"][selected] == unmasked[selected]).all()
        # Where not selected (label -100), the input is the original token.
        assert (batch["input_ids"][~selected] == unmasked[~selected]).all()
        assert (batch["attention_mask"] == (unmasked != tokenizer.pad_id)).all()
        chosen = batch["input_ids"][selected]
        selected_total += int(selected.sum())
        eligible_total += int(eligible.sum())
        masked += int((chosen == tokenizer.mask_id).sum())
        kept += int((chosen == unmasked[selected]).sum())
        randomised += int(((chosen != tokenizer.mask_id) & (chosen != unmasked[selected])).sum())
        assert not torch.isin(chosen[chosen != tokenizer.mask_id], specials).any()
    assert eligible_total > 50_000
    assert abs(selected_total / eligible_total - 0.15) < 0.01
    assert abs(masked / selected_total - 0.8) < 0.02
    assert (
        abs(randomised / selected_total - 0.1) < 0.02
    )  # a random token rarely equals the original
    assert abs(kept / selected_total - 0.1) < 0.02


def test_same_seed_same_batches(tokenizer: TextTokenizer, texts: list[str]) -> None:
    def first_batches(seed: int, mask_prob: float = 0.15) -> list[dict[str, torch.Tensor]]:
        stream = mlm_batches(
            iter(texts[:200]), tokenizer, seq_len=32, batch_size=4, mask_prob=mask_prob, seed=seed
        )
        return list(itertools.islice(stream, 5))

    def same(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> bool:
        return all(torch.equal(x[k], y[k]) for x, y in zip(a, b, strict=True) for k in x)

    assert same(first_batches(7), first_batches(7))
    assert not same(first_batches(7), first_batches(8))
    heavy = first_batches(7, mask_prob=0.5)
    share = sum(int((b["labels"] != IGNORE_INDEX).sum()) for b in heavy) / sum(
        int(b["attention_mask"].sum()) for b in heavy
    )
    assert 0.4 < share < 0.5  # 50 % of real tokens, a few [CLS]/[SEP] among the attended


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seq_len": 1}, "seq_len"),
        ({"batch_size": 0}, "batch_size"),
        ({"mask_prob": 0.0}, "mask_prob"),
        ({"mask_prob": 1.0}, "mask_prob"),
    ],
)
def test_bad_arguments(tokenizer: TextTokenizer, kwargs: dict[str, float], message: str) -> None:
    arguments: dict[str, float] = {"seq_len": 16, "batch_size": 2, **kwargs}
    with pytest.raises(DataError, match=message):
        mlm_batches(iter(["a"]), tokenizer, **arguments)  # type: ignore[arg-type]


def test_causal_batches_are_the_packed_ids_labelled_but_for_padding(
    tokenizer: TextTokenizer, texts: list[str]
) -> None:
    sample = texts[:300]
    batches = list(clm_batches(iter(sample), tokenizer, seq_len=64, batch_size=8))
    originals = packed(sample, tokenizer, seq_len=64, batch_size=8)
    assert len(batches) == len(originals) > 10
    for batch, ids in zip(batches, originals, strict=True):
        assert set(batch) == {"input_ids", "attention_mask", "labels"}
        for tensor in batch.values():
            assert tensor.dtype == torch.int64
            assert tensor.shape == (8, 64)
        assert torch.equal(batch["input_ids"], ids)  # nothing masked
        real = ids != tokenizer.pad_id
        assert torch.equal(batch["attention_mask"], real.to(torch.int64))
        # the labels are the ids themselves (the model shifts them), padding never a target
        assert torch.equal(batch["labels"][real], ids[real])
        assert (batch["labels"][~real] == IGNORE_INDEX).all()
    assert any(bool((b["labels"] == IGNORE_INDEX).any()) for b in batches)  # padding was there


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"seq_len": 1}, "seq_len"), ({"batch_size": 0}, "batch_size")]
)
def test_bad_causal_arguments(
    tokenizer: TextTokenizer, kwargs: dict[str, int], message: str
) -> None:
    arguments: dict[str, int] = {"seq_len": 16, "batch_size": 2, **kwargs}
    with pytest.raises(DataError, match=message):
        clm_batches(iter(["a"]), tokenizer, **arguments)
