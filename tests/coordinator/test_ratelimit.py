"""LoginLimiter with a fake clock: waits grow with failures, success forgives, old failures fade,
addresses count by prefix, and the account-wide counter slows but never locks the owner out."""

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
    limiter = LoginLimiter(LIMITS, clock)
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
        LoginLimits(user_threshold=3, address_threshold=6, first_delay=2.0), clock
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
    with pytest.raises(TooManyAttempts):
        fail(limiter, user="carol", address="10.0.0.2")  # the same /24: the same prefix
    fail(limiter, user="carol", address="10.0.1.2")  # another prefix is unaffected


def test_failures_older_than_the_window_are_forgotten() -> None:
    clock = FakeClock()
    limiter = LoginLimiter(LIMITS, clock)
    for _ in range(3):
        fail(limiter)
    assert limiter.retry_after("alice", "10.0.0.1") > 0
    clock.advance(601.0)
    assert limiter.retry_after("alice", "10.0.0.1") == 0
    limiter.sweep()
    assert len(limiter) == 0


def test_the_number_of_remembered_keys_is_bounded() -> None:
    clock = FakeClock()
    limiter = LoginLimiter(LoginLimits(window=10.0, max_tracked=50), clock)
    for i in range(40):
        fail(limiter, user=f"user{i}", address=f"10.0.{i}.1")
    clock.advance(11.0)
    fail(limiter, user="late", address="10.9.9.9")  # over the bound: the stale keys are swept
    assert len(limiter) == 3  # late's own: from that prefix, the prefix, and over all


def test_addresses_count_by_prefix() -> None:
    clock = FakeClock()
    limiter = LoginLimiter(LoginLimits(user_threshold=100, address_threshold=4), clock)
    for address in ("127.0.0.1", "127.9.9.9", "::ffff:127.0.0.2", "127.200.0.1"):
        fail(limiter, user="x", address=address)  # all of 127/8 is one prefix
    with pytest.raises(TooManyAttempts):
        fail(limiter, user="y", address="127.1.2.3")
    for i in range(4):  # one home's IPv6 /56 holds 256 /64s and more: one prefix
        fail(limiter, user=f"u{i}", address=f"2001:db8:0:{i}::1")
    with pytest.raises(TooManyAttempts):
        fail(limiter, user="z", address="2001:db8:0:ff::9")
    fail(limiter, user="z", address="2001:db8:0:100::9")  # the next /56


def test_the_owner_is_never_locked_out_by_guessers_elsewhere() -> None:
    clock = FakeClock()
    limits = LoginLimits(
        user_threshold=3, address_threshold=1000, account_threshold=10, account_max_delay=4.0
    )
    limiter = LoginLimiter(limits, clock)
    # guessers on 200 networks, each waiting as told: the account-wide counter slows each
    # network's second guess on, by at most 4 s; after 3 failures a network waits its own waits
    for net in range(200):
        for _ in range(3):
            clock.advance(limiter.retry_after("alice", f"10.{net}.0.1"))
            fail(limiter, address=f"10.{net}.0.1")
        with pytest.raises(TooManyAttempts):
            fail(limiter, address=f"10.{net}.0.1")
        assert limiter.retry_after("alice", f"10.{net}.0.1") <= 4.0
    # the owner, from a network with no failures on this account, is let in at once
    assert limiter.retry_after("alice", "192.0.2.10") == 0
    limiter.begin("alice", "192.0.2.10")
    limiter.succeeded("alice", "192.0.2.10")
    # the guessers' networks stay slowed after the owner's success
    assert limiter.retry_after("alice", "10.199.0.1") > 0


def test_the_account_wide_slow_down_is_capped_at_a_few_seconds() -> None:
    clock = FakeClock()
    limits = LoginLimits(
        user_threshold=1000, address_threshold=1000, account_threshold=5, account_max_delay=4.0
    )
    limiter = LoginLimiter(limits, clock)
    for net in range(20):  # failures for alice spread over 20 networks
        fail(limiter, address=f"10.{net}.0.1")
    # the owner mistyped once at home: home now meets the account-wide counter, but only as
    # a delay of at most account_max_delay, never a lock
    home = "192.0.2.10"
    fail(limiter, address=home)
    for _ in range(20):
        wait = limiter.retry_after("alice", home)
        assert 0 < wait <= 4.0
        clock.advance(wait)
        fail(limiter, address=home)
    clock.advance(limiter.retry_after("alice", home))
    limiter.begin("alice", home)
    limiter.succeeded("alice", home)
    assert limiter.retry_after("alice", home) == 0
