from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from core.data import DataError, TextTokenizer, load_tokenizer, train_tokenizer, write_demo_corpus


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    paths = write_demo_corpus(tmp_path_factory.mktemp("corpus"), shards=2, megabytes=0.2)
    return [json.loads(line)["text"] for p in paths for line in gzip.open(p, "rt")]


def test_train_save_load_and_round_trip(tmp_path: Path, texts: list[str]) -> None:
    path = tmp_path / "sub" / "tokenizer.json"
    trained = train_tokenizer(iter(texts), vocab_size=400, path=path)
    assert path.is_file()
    loaded = load_tokenizer(path)
    specials = [loaded.pad_id, loaded.unk_id, loaded.cls_id, loaded.sep_id, loaded.mask_id]
    assert specials == [0, 1, 2, 3, 4]
    assert loaded.special_ids == frozenset(specials)
    assert 100 < loaded.vocab_size <= 400
    assert loaded.vocab_size == trained.vocab_size

    sample = texts[:50]
    batch = loaded.encode_batch(sample)
    assert batch == [trained.encode(text) for text in sample]
    for text, ids in zip(sample, batch, strict=True):
        assert ids
        assert not set(ids) & loaded.special_ids
        assert loaded.decode(ids) == text.lower()  # lowercase, punctuation rejoined
        assert loaded.encode(loaded.decode(ids)) == ids


def test_unknown_characters_and_special_tokens(tmp_path: Path, texts: list[str]) -> None:
    tokenizer = train_tokenizer(texts[:200], vocab_size=300, path=tmp_path / "t.json")
    assert tokenizer.unk_id in tokenizer.encode("the cat ж")
    assert tokenizer.encode("THE CAT") == tokenizer.encode("the cat")
    ids = [tokenizer.cls_id, *tokenizer.encode("the cat"), tokenizer.sep_id, tokenizer.pad_id]
    assert tokenizer.decode(ids) == "the cat"


def test_missing_or_damaged_files_raise_data_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(DataError, match=str(missing)):
        load_tokenizer(missing)

    damaged = tmp_path / "damaged.json"
    damaged.write_text('{"version": "1.0", "model": ')
    with pytest.raises(DataError, match=str(damaged)):
        load_tokenizer(damaged)

    not_a_tokenizer = tmp_path / "other.json"
    not_a_tokenizer.write_text('{"hello": "world"}')
    with pytest.raises(DataError, match=str(not_a_tokenizer)):
        load_tokenizer(not_a_tokenizer)

    # A valid tokenizer file without our special tokens is refused too, naming what is missing.
    plain = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    plain.pre_tokenizer = pre_tokenizers.Whitespace()
    plain.train_from_iterator(
        ["a b c"], trainer=trainers.WordPieceTrainer(special_tokens=["[UNK]"], show_progress=False)
    )
    foreign = tmp_path / "foreign.json"
    plain.save(str(foreign))
    with pytest.raises(DataError, match=r"lacks the special token \[PAD\]"):
        load_tokenizer(foreign)
    with pytest.raises(DataError, match="lacks"):
        TextTokenizer(plain)


def test_vocab_size_must_leave_room_for_words(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="vocab_size"):
        train_tokenizer(["a b"], vocab_size=5, path=tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()
