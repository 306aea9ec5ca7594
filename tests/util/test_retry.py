"""Retry: capped exponential backoff with jitter, one log line per change of reason."""

from __future__ import annotations

import logging
import random

import pytest

from core.util.retry import Retry


def test_waits_double_up_to_the_cap_with_jitter_and_reset_on_success() -> None:
    retry = Retry("x", logging.getLogger("t"), first=1.0, cap=8.0, rng=random.Random(3))
    waits = [retry.failed("down") for _ in range(7)]
    ceilings = [1, 2, 4, 8, 8, 8, 8]
    for wait, ceiling in zip(waits, ceilings, strict=True):
        assert ceiling / 2 <= wait <= ceiling
    assert len(set(waits)) == len(waits)  # jittered: peers that failed together spread out
    retry.succeeded()
    assert retry.reason is None
    assert retry.failed("down") <= 1.0


def test_logs_once_per_change_of_reason(caplog: pytest.LogCaptureFixture) -> None:
    retry = Retry("could not load", logging.getLogger("t"), first=0.1, cap=1.0)
    with caplog.at_level(logging.INFO, logger="t"):
        for reason in ["no donor"] * 50 + ["donor refused"] * 50 + ["no donor"] * 3:
            retry.failed(reason)
        retry.succeeded()
        retry.succeeded()  # nothing to say twice
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "could not load: no donor (retrying with backoff)",
        "could not load: donor refused (retrying with backoff)",
        "could not load: no donor (retrying with backoff)",
    ]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos == ["could not load: done after 103 failed attempt(s)"]


def test_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="first"):
        Retry("x", logging.getLogger("t"), first=0.0)
    with pytest.raises(ValueError, match="first"):
        Retry("x", logging.getLogger("t"), first=2.0, cap=1.0)
