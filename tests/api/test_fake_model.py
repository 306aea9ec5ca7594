"""The fake engine's "try the model": the same answer for the same text on every run, shaped as the
engine's (five guesses, best first, the text filled in; or a completion), refusals in the engine's
words, and the reasons it cannot answer (no project, scripted ones); and the request's own checks."""

from __future__ import annotations

import dataclasses

import pytest

from core.api import BadRequest, TryModelRequest
from core.api.codec import decode, encode
from core.api.schema import ModelAnswer, filled_in, with_masks
from core.api.testing import FakeEngine


async def test_the_fake_model_answers_the_same_every_time() -> None:
    engine = FakeEngine("contributing")
    first = await engine.try_model("The ___ of the river and the [mask] of the sea.")
    again = await engine.try_model("The ___ of the river and the [mask] of the sea.")
    assert dataclasses.replace(again, copied_at=first.copied_at) == first  # the clock moved on
    assert (first.code, first.kind, first.project) == ("answered", "masked", "barnraise-demo")
    shares = [g.probability for g in first.guesses]
    assert len(shares) == 5
    assert shares == sorted(shares, reverse=True)
    best = first.guesses[0].word
    assert first.text == f"The {best} of the river and the {best} of the sea."
    assert first.epoch == engine.history_[-1].epoch
    other = await engine.try_model("Another [MASK] altogether.")
    assert other.guesses != first.guesses  # the words follow the text
    # through the wire and back, as a client reads it
    assert decode(ModelAnswer, encode(first), strict=False) == first


async def test_a_causal_fake_model_completes_the_text() -> None:
    engine = FakeEngine("contributing")
    engine.model_kind = "causal"
    answer = await engine.try_model("The volunteers ")
    assert answer.kind == "causal"
    assert answer.completion
    assert answer.text == f"The volunteers {answer.completion}"
    assert answer.guesses == []


async def test_the_fake_says_why_its_model_cannot_answer() -> None:
    fresh = FakeEngine("fresh")
    nothing = await fresh.try_model("The ___ sat.")
    assert (nothing.code, nothing.project, nothing.answered) == ("no_project", None, False)
    engine = FakeEngine("contributing")
    engine.refuse_model("unloaded", "The engine unloaded barnraise-demo's model.")
    refused = await engine.try_model("The ___ sat.")
    assert (refused.code, refused.reason) == (
        "unloaded",
        "The engine unloaded barnraise-demo's model.",
    )
    engine.refuse_model(None)
    assert (await engine.try_model("The ___ sat.")).answered
    with pytest.raises(BadRequest, match=r"put \[MASK\] \(or ___\)"):
        await engine.try_model("Nothing is missing.")
    with pytest.raises(BadRequest, match="type a sentence"):
        await engine.try_model("")
    assert engine.calls.count("try_model") == 4


def test_the_request_checks_its_text() -> None:
    with pytest.raises(BadRequest, match="type a sentence for the model first"):
        TryModelRequest(" \t")
    with pytest.raises(BadRequest, match="501 characters long; the model takes at most 500"):
        TryModelRequest("a" * 501)
    assert TryModelRequest("a" * 500).text == "a" * 500
    # a code of a newer engine reads as "unknown"
    newer = decode(ModelAnswer, {"project": "p", "code": "overheated"}, strict=False)
    assert (newer.code, newer.answered) == ("unknown", False)


def test_every_spelling_of_a_missing_word() -> None:
    assert with_masks("a ___ b [mask] c _____ d [MASK] e __ f") == (
        "a [MASK] b [MASK] c [MASK] d [MASK] e __ f"
    )
    assert filled_in("a ___ b [Mask] c", ["x"]) == "a x b [Mask] c"  # the rest stay as typed
    assert filled_in("a ___ b [Mask] c", ["x", "y"]) == "a x b y c"
