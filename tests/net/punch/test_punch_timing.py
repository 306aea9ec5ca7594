"""Hole-punch timing, back-off and rate limits, on a fake clock."""

from __future__ import annotations

import pytest

from core.net.punch.timing import MAX_RTT, Backoff, PunchTiming, RateLimit
from core.util.clock import FakeClock


def test_the_initiator_fires_half_the_smallest_round_trip_after_sync() -> None:
    timing = PunchTiming()
    # a slow answer (a busy peer) does not delay the dials: queuing only adds delay
    assert timing.rtt([0.120, 0.080, 0.300]) == pytest.approx(0.080)
    assert timing.initiator_fires_at(50.0, [0.120, 0.080]) == pytest.approx(50.040)


def test_an_absurd_round_trip_is_capped_and_no_sample_is_an_error() -> None:
    timing = PunchTiming()
    assert timing.rtt([42.0]) == MAX_RTT
    assert timing.rtt([-1.0, 0.2]) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="no round-trip sample"):
        timing.rtt([])


def test_windows_cover_syn_retransmissions_and_the_responder_stops_first() -> None:
    timing = PunchTiming(dial_window=3.5, max_dial_window=10.0)
    rtt = 0.2
    initiator = timing.window([rtt])
    responder = timing.responder_window(rtt)
    assert initiator == pytest.approx(3.9)  # past the kernel's SYN retries at 1 s and 3 s
    # B fires about rtt/2 after A... and must give up before A's sockets close
    assert rtt / 2 + responder < initiator
    assert timing.window([MAX_RTT]) == 10.0
    assert timing.responder_window(MAX_RTT) <= 10.0 - MAX_RTT


def test_rounds_are_spaced_more_and_more() -> None:
    timing = PunchTiming(attempts=3, retry_pause=1.0)
    assert [timing.pause_before(n) for n in (1, 2, 3)] == [0.0, 1.0, 2.0]


def test_backoff_doubles_up_to_its_cap_and_a_success_forgets_it() -> None:
    clock = FakeClock(monotonic_start=1000.0)
    timing = PunchTiming(backoff=600.0, max_backoff=3600.0)
    backoff = Backoff(timing, clock)
    assert backoff.waiting("p") == 0.0
    assert backoff.failed("p") == 600.0
    clock.advance(599.0)
    assert backoff.waiting("p") == pytest.approx(1.0)
    clock.advance(1.0)
    assert backoff.waiting("p") == 0.0
    assert [backoff.failed("p") for _ in range(4)] == [1200.0, 2400.0, 3600.0, 3600.0]
    assert backoff.waiting("q") == 0.0  # per pair
    backoff.succeeded("p")
    assert backoff.waiting("p") == 0.0
    assert backoff.failed("p") == 600.0


def test_backoff_forgets_peers_not_punched_again_for_a_longest_back_off() -> None:
    """Every relayed peer ever met once must not stay in memory for as long as the engine runs."""
    clock = FakeClock(monotonic_start=1000.0)
    timing = PunchTiming(backoff=600.0, max_backoff=3600.0)
    backoff = Backoff(timing, clock)
    for n in range(10_000):
        backoff.failed(f"stranger-{n}")
        if n % 100 == 0:
            backoff.failed("regular")  # fails now and then: its back-off keeps doubling
        clock.advance(10.0)
        assert len(backoff) <= (600 + 3600) // 10 + 2
    assert backoff.waiting("stranger-9999") > 0
    assert backoff.failed("regular") == 3600.0


def test_rate_limit_per_key_and_in_total_over_a_sliding_period() -> None:
    clock = FakeClock(monotonic_start=1000.0)
    limit = RateLimit(2, period=60.0, total=3, clock=clock)
    assert limit.allow("a")
    assert limit.allow("a")
    assert not limit.allow("a")  # a burst from one peer
    assert limit.allow("b")
    assert not limit.allow("c")  # the total is reached: many peers at once
    clock.advance(60.0)
    assert limit.allow("a")
    assert limit.allow("c")
