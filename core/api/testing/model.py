"""The fake engine's model: made-up guesses and completions, the same for the same text on every run.

Shaped like the real answers (``core.engine.trying``): a masked model's five best guesses for the
first missing word with probabilities, the text with the best guess in every missing word; a causal
model's text completed. A masked model refuses a text without a missing word, in the engine's words.
"""

from __future__ import annotations

import zlib
from typing import Literal

from core.api.errors import BadRequest
from core.api.schema import MASK, Guess, ModelAnswer, filled_in, question_problem, with_masks

FakeKind = Literal["masked", "causal"]

WORDS = ("model", "world", "data", "future", "peers", "network", "language", "weather", "garden")
SHARES = (0.42, 0.17, 0.09, 0.05, 0.03)
"""The guesses' probabilities, best first."""
CONTINUATION = "and every computer that joins makes the shared model a little better and faster"
COPIED_AGO = 12.0
"""Seconds before the question that the fake's weights were "copied"."""
NO_MASK = (
    "put [MASK] (or ___) where the model should guess the missing word, as in: the cat sat "
    "on the [MASK]"
)


def answer(project: str, text: str, kind: FakeKind, *, epoch: int, now: float) -> ModelAnswer:
    """What ``project``'s model of ``kind`` answers to ``text`` (``BadRequest`` as the engine
    refuses a question)."""
    problem = question_problem(text)
    if problem is not None:
        raise BadRequest(problem)
    seed = zlib.crc32(text.encode())  # not hash(): the same on every run
    copied_at = now - COPIED_AGO
    if kind == "causal":
        start = seed % 4
        completion = " ".join(CONTINUATION.split()[start : start + 8])
        return ModelAnswer(
            project,
            "answered",
            kind="causal",
            text=f"{text.rstrip()} {completion}",
            completion=completion,
            epoch=epoch,
            copied_at=copied_at,
        )
    missing = with_masks(text).count(MASK)
    if not missing:
        raise BadRequest(NO_MASK)
    words = [WORDS[(seed + i) % len(WORDS)] for i in range(len(SHARES))]
    return ModelAnswer(
        project,
        "answered",
        kind="masked",
        guesses=[Guess(word, share) for word, share in zip(words, SHARES, strict=True)],
        text=filled_in(text, [words[0]] * missing),
        epoch=epoch,
        copied_at=copied_at,
    )
