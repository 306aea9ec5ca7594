"""SignupLimiter with a fake clock: per address prefix and overall, sliding windows."""

from __future__ import annotations

import pytest

from core.coordinator import SignupLimiter, SignupLimits
from core.coordinator.errors import TooManyAttempts
from core.util.clock import FakeClock


def test_sign_ups_are_limited_per_prefix_and_overall() -> None:
    clock = FakeClock()
    limiter = SignupLimiter(
        SignupLimits(per_prefix=3, prefix_window=100.0, total=5, total_window=10.0),
        clock,
    )
    for address in ("127.0.0.1", "127.8.8.8", "::ffff:127.0.0.3"):  # 127/8 is one prefix
        limiter.attempt(address)
    with pytest.raises(TooManyAttempts, match="sign-ups") as refused:
        limiter.attempt("127.0.0.1")
    assert refused.value.retry_after == 100
    limiter.attempt("2001:db8::1")
    limiter.attempt("2001:db8:0:1::1")  # the same /56
    with pytest.raises(TooManyAttempts) as overall:  # 5 in 10 s: everyone waits
        limiter.attempt("192.0.2.1")
    assert overall.value.retry_after == 10
    clock.advance(10.0)
    limiter.attempt("192.0.2.1")
    limiter.attempt("2001:db8:0:ff::1")  # the third of its /56
    with pytest.raises(TooManyAttempts):
        limiter.attempt("2001:db8:0:ff::2")
    clock.advance(100.0)
    limiter.attempt("127.0.0.1")  # the window moved on
    limiter.sweep()
    assert len(limiter) == 1
