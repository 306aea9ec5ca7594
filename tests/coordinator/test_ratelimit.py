"""LoginLimiter with a fake clock: waits grow with failures, success forgives, old failures fade."""

from __future__ import annotations

import pytest

from core.coordinator import LoginLimiter, LoginLimits
from core.coordinator.errors import TooManyAttempts
from core.coordinator.http import status_and_code
from core.util.clock import FakeClock

LIMITS = LoginLimits(
    user_threshold=3, address_threshold=5, window=600.0, first_delay=2.0, max_delay=30.0
)


def fail(limiter: LoginLimiter, user: str = "alice", address: str = "10.0.0.1") -> None:
    limiter.begin(user, address)  # counted as failed until it succeeds


def test_failures_lead_to_doubling_waits() -> None:
    clock = FakeClock()
    limiter = LoginLimiter(LIMITS, clock.monotonic)
    for _ in range(3):
        fail(limiter)
    with pytest.raises(TooManyAttempts) as first:
        fail(limiter)
    assert first.value.retry_after == 2
    assert status_and_code(first.value) == (429, "too_many_attempts")
    clock.advance(2.0)
    fail(limiter)  # let in, and failed again: the wait doubles
    with pytest.raises(TooManyAttempts) as second:
        fail(limiter)
    assert second.value.retry_after == 4
    clock.advance(4.0)
    fail(limiter)
    assert limiter.retry_after("alice", "10.0.0.1") == 8.0
    for _ in range(10):  # keep trying after each wait: it stops growing at max_delay
        clock.advance(limiter.retry_after("alice", "10.0.0.1"))
        fail(limiter)
    assert limiter.retry_after("alice", "10.0.0.1") == 30.0


def test_success_clears_the_name_but_not_the_address() -> None:
    clock = FakeClock()
    limiter = LoginLimiter(
        LoginLimits(user_threshold=3, address_threshold=6, first_delay=2.0), clock.monotonic
    )
    fail(limiter)
    fail(limiter)
    limiter.begin("alice", "10.0.0.1")
    limiter.succeeded("alice", "10.0.0.1")
    for _ in range(2):
        fail(limiter)  # the name starts over: two more failures are still allowed
    fail(limiter)
    with pytest.raises(TooManyAttempts):
        fail(limiter)
    # the address has five failures on record (the success was forgiven, not the others)
    fail(limiter, user="bob")  # the sixth from this address
    with pytest.raises(TooManyAttempts):
        fail(limiter, user="carol")
    fail(limiter, user="carol", address="10.0.0.2")  # another address is unaffected


def test_failures_older_than_the_window_are_forgotten() -> None:
    clock = FakeClock()
    limiter = LoginLimiter(LIMITS, clock.monotonic)
    for _ in range(3):
        fail(limiter)
    assert limiter.retry_after("alice", "10.0.0.1") > 0
    clock.advance(601.0)
    assert limiter.retry_after("alice", "10.0.0.1") == 0
    limiter.sweep()
    assert len(limiter) == 0


def test_the_number_of_remembered_keys_is_bounded() -> None:
    clock = FakeClock()
    limiter = LoginLimiter(LoginLimits(window=10.0, max_tracked=50), clock.monotonic)
    for i in range(40):
        fail(limiter, user=f"user{i}", address=f"10.0.{i}.1")
    clock.advance(11.0)
    fail(limiter, user="late", address="10.9.9.9")  # over the bound: the stale keys are swept
    assert len(limiter) == 2
