"""Admission of inbound handshakes: a flood pushes out its own oldest attempts, never a newcomer."""

from __future__ import annotations

import pytest

from core.net.host.admission import Admission, Attempt, network_prefix


def admit(admission: Admission, source: str, dropped: list[str]) -> Attempt:
    attempt = admission.admit(source)
    attempt.drop = lambda: dropped.append(f"{attempt.source}#{id(attempt)}")
    return attempt


@pytest.mark.parametrize(
    ("source", "prefix"),
    [
        ("203.0.113.7", "203.0.113.0/24"),
        ("::ffff:203.0.113.7", "203.0.113.0/24"),  # an IPv4 peer on a dual-stack socket
        ("2001:db8:aa:bbcc::1", "2001:db8:aa:bb00::/56"),
        ("fe80::1%eth0", "fe80::/56"),
        ("relay:12D3Koo", "relay:12D3Koo"),
    ],
)
def test_sources_are_counted_by_network_prefix(source: str, prefix: str) -> None:
    assert network_prefix(source) == prefix


def test_a_source_over_its_limit_loses_its_own_oldest_attempt() -> None:
    admission = Admission(total=100, per_source=3, per_prefix=50)
    dropped: list[str] = []
    flood = [admit(admission, "203.0.113.7", dropped) for _ in range(3)]
    other = admit(admission, "198.51.100.1", dropped)
    newest = admit(admission, "203.0.113.7", dropped)
    assert dropped == [f"203.0.113.7#{id(flood[0])}"]
    assert admission.pending == 4
    admission.release(flood[0])  # the dropped attempt's task ends later: counted once only
    assert admission.pending == 4
    for attempt in (*flood[1:], other, newest):
        admission.release(attempt)
    assert admission.pending == 0


def test_a_prefix_over_its_limit_loses_its_oldest_whatever_the_address() -> None:
    admission = Admission(total=100, per_source=10, per_prefix=4)
    dropped: list[str] = []
    first = admit(admission, "203.0.113.1", dropped)
    for host in range(2, 5):
        admit(admission, f"203.0.113.{host}", dropped)
    admit(admission, "203.0.113.200", dropped)
    assert dropped == [f"203.0.113.1#{id(first)}"]


def test_when_full_the_most_crowded_prefix_pays_not_the_newcomer() -> None:
    admission = Admission(total=6, per_source=10, per_prefix=10)
    dropped: list[str] = []
    legit = admit(admission, "198.51.100.9", dropped)  # the oldest attempt of all
    flood = [admit(admission, f"203.0.113.{n}", dropped) for n in range(1, 6)]
    late = admit(admission, "192.0.2.1", dropped)  # full: the flood's block gives up a slot
    assert dropped == [f"203.0.113.1#{id(flood[0])}"]
    assert admission.pending == 6
    for attempt in (legit, *flood, late):
        admission.release(attempt)
    assert admission.pending == 0
    assert admission.dropped == 1


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Admission(total=0, per_source=1, per_prefix=1)


def test_a_silent_attempt_whose_bytes_arrived_meanwhile_is_not_taken_for_silent() -> None:
    admission = Admission(total=100, per_source=2, per_prefix=50)
    dropped: list[str] = []
    legit = admit(admission, "203.0.113.7", dropped)
    legit.spoken = lambda: True  # its ClientHello is in the socket; the loop has not polled yet
    silent = admit(admission, "203.0.113.7", dropped)
    admit(admission, "203.0.113.7", dropped)
    assert dropped == [f"203.0.113.7#{id(silent)}"]
    assert legit.speaking


def test_an_ended_attempt_lets_go_of_its_owners_callbacks() -> None:
    """The callbacks hold the owner's transport and timers, which hold the attempt: keeping them
    would make every dropped connection garbage that only the cyclic collector frees."""
    admission = Admission(total=100, per_source=1, per_prefix=50)
    calls: list[str] = []
    first = admission.admit("203.0.113.7")
    first.drop = lambda: calls.append("first dropped")
    first.spoken = lambda: False
    second = admission.admit("203.0.113.7")  # over the source's limit: the first is dropped
    assert calls == ["first dropped"]
    second.drop = lambda: calls.append("second dropped")
    second.spoken = lambda: True
    admission.release(second)
    for attempt in (first, second):
        attempt.drop()  # the defaults: nothing happens, nothing is held
        assert attempt.spoken() is False
    assert calls == ["first dropped"]
