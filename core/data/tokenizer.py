"""A lowercase WordPiece tokenizer trained on local text (never fetched from the Hub).

Built with the `tokenizers` library: BERT-style normalisation (lowercase, accents stripped) and
pre-tokenisation (split on spaces and punctuation), WordPiece subwords, and the five special tokens
masked language modelling needs. ``encode`` adds no special tokens; packing sequences is the job of
``batches``. The trained tokenizer is saved as the library's JSON file, so every peer of a project
can load the very same vocabulary.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from core.data.errors import DataError

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)


class TextTokenizer:
    """Text to token ids and back, with the ids of the special tokens at hand."""

    def __init__(self, tokenizer: Tokenizer, *, origin: str = "tokenizer") -> None:
        ids: dict[str, int] = {}
        for token in SPECIAL_TOKENS:
            token_id = tokenizer.token_to_id(token)
            if token_id is None:
                raise DataError(f"{origin} lacks the special token {token}")
            ids[token] = token_id
        self._tokenizer = tokenizer
        self.pad_id = ids[PAD]
        self.unk_id = ids[UNK]
        self.cls_id = ids[CLS]
        self.sep_id = ids[SEP]
        self.mask_id = ids[MASK]
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def special_ids(self) -> frozenset[int]:
        """The ids that are never masked or predicted."""
        return frozenset((self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id))

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``, without [CLS] or [SEP]."""
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` for many texts at once (in parallel inside the library)."""
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [list(encoding.ids) for encoding in encodings]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens left out and subwords joined."""
        return self._tokenizer.decode(list(ids), skip_special_tokens=True)

    def save(self, path: Path) -> None:
        """Write the tokenizer as JSON, atomically (readers never see half a file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        self._tokenizer.save(str(partial))
        os.replace(partial, path)


def train_tokenizer(texts: Iterable[str], vocab_size: int, path: Path) -> TextTokenizer:
    """Train a WordPiece vocabulary of at most ``vocab_size`` on ``texts`` and save it at ``path``."""
    if vocab_size <= len(SPECIAL_TOKENS):
        raise DataError(f"vocab_size must exceed {len(SPECIAL_TOKENS)}, got {vocab_size}")
    tokenizer = Tokenizer(models.WordPiece(unk_token=UNK))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    # Special tokens are listed first, so they get the ids 0 to 4 in that order.
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    result = TextTokenizer(tokenizer, origin="the trained tokenizer")
    result.save(Path(path))
    return result


def load_tokenizer(path: Path) -> TextTokenizer:
    """Load a tokenizer saved by ``train_tokenizer``; ``DataError`` naming ``path`` if that fails."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"tokenizer file {path} does not exist")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises plain Exception for unreadable or bad JSON
        raise DataError(f"tokenizer file {path} is damaged or not a tokenizer: {exc}") from exc
    return TextTokenizer(tokenizer, origin=f"tokenizer file {path}")
