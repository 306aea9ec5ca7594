"""The reachability classifier on synthetic answers, observed addresses, and connection kinds."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from core.net import Identity
from core.net.connection_kinds import connection_kinds
from core.net.reach.observed import ObservedAddresses
from core.net.reach.reachability import Classifier, Outcome, Reachability
from core.util.clock import FakeClock


def answers(classifier: Classifier, clock: FakeClock, seq: str, *, available: int) -> Reachability:
    """Feed answers written as 'A+ B- C+' (peer, reachable), one second apart."""
    state = classifier.state
    for item in seq.split():
        clock.advance(1)
        state = classifier.add(
            Outcome(item[:-1], item[-1] == "+", clock.monotonic(), "203.0.113.7:4001"),
            available=available,
        )
    return state


def make(confidence: int = 3, max_age: float = 3600.0) -> tuple[Classifier, FakeClock]:
    clock = FakeClock(monotonic_start=1000.0)
    return Classifier(confidence=confidence, max_age=max_age, clock=clock), clock


def test_public_needs_successes_from_distinct_peers() -> None:
    c, clock = make()
    assert (
        answers(c, clock, "A+ A+ A+ A+", available=5) is Reachability.UNKNOWN
    )  # one peer, 4 times
    assert answers(c, clock, "B+", available=5) is Reachability.UNKNOWN
    assert answers(c, clock, "C+", available=5) is Reachability.PUBLIC
    assert c.reached_address() == "203.0.113.7:4001"


def test_private_needs_failures_from_distinct_peers() -> None:
    c, clock = make()
    assert answers(c, clock, "A- B-", available=4) is Reachability.UNKNOWN
    assert answers(c, clock, "C-", available=4) is Reachability.PRIVATE


def test_with_one_peer_to_ask_its_answer_decides() -> None:
    # a project whose backbone is one public server (the NAT lab): nobody else could confirm
    c, clock = make()
    assert c.needed(1) == 1
    assert answers(c, clock, "S+", available=1) is Reachability.PUBLIC
    c2, clock2 = make()
    assert answers(c2, clock2, "S-", available=1) is Reachability.PRIVATE
    assert c.needed(0) == 1  # never zero answers
    assert c.needed(10) == 3


def test_a_flip_needs_fresh_evidence_that_outnumbers() -> None:
    c, clock = make()
    assert answers(c, clock, "A+ B+ C+", available=3) is Reachability.PUBLIC
    # one peer failing once does not take the confirmed address away
    assert answers(c, clock, "A-", available=3) is Reachability.PUBLIC
    assert answers(c, clock, "B-", available=3) is Reachability.PUBLIC  # 2 fresh failures < 3
    assert answers(c, clock, "C-", available=3) is Reachability.PRIVATE
    # back: three fresh successes again
    assert answers(c, clock, "A+ B+", available=3) is Reachability.PRIVATE
    assert answers(c, clock, "C+", available=3) is Reachability.PUBLIC


def test_old_failures_do_not_count_as_fresh_evidence_after_a_flip() -> None:
    c, clock = make(confidence=2)
    assert answers(c, clock, "A- B-", available=3) is Reachability.PRIVATE
    # 3 fresh successes, 3 against: ok >= failed
    assert answers(c, clock, "C+ D+ E+", available=3) is Reachability.PUBLIC
    # the old failures of A and B are older than the flip: PRIVATE needs new ones
    assert c.update(available=3) is Reachability.PUBLIC


def test_a_peers_newest_answer_replaces_its_older_one() -> None:
    c, clock = make(confidence=2)
    assert answers(c, clock, "A- B-", available=2) is Reachability.PRIVATE
    # both changed their mind (a port forward was added)
    assert answers(c, clock, "A+ B+", available=2) is Reachability.PUBLIC
    assert [o.reachable for o in c.outcomes()] == [True, True]
    late = Outcome(
        "A", False, clock.monotonic() - 100
    )  # an answer older than A's newest is ignored
    assert c.add(late, available=2) is Reachability.PUBLIC


def test_answers_age_out_to_unknown() -> None:
    c, clock = make(confidence=1, max_age=60.0)
    assert answers(c, clock, "A+", available=1) is Reachability.PUBLIC
    clock.advance(59)
    assert c.update(available=1) is Reachability.PUBLIC
    clock.advance(2)
    assert c.update(available=1) is Reachability.UNKNOWN
    assert c.outcomes() == []


def test_reset_forgets_everything() -> None:
    c, clock = make(confidence=1)
    answers(c, clock, "A+", available=1)
    c.reset()
    assert c.state is Reachability.UNKNOWN
    assert c.reached_address() is None


def test_mixed_answers_that_meet_both_thresholds_favour_public() -> None:
    # a dial-back that met our identity proves dialability; a failure may be the asked peer's fault
    c, clock = make(confidence=1)
    assert answers(c, clock, "A- B+", available=2) is Reachability.PUBLIC


def test_confidence_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Classifier(confidence=0)


# ---- observed addresses -------------------------------------------------------------------------


def peer() -> Any:
    return Identity.generate().peer_id


def test_candidates_count_distinct_observer_networks() -> None:
    clock = FakeClock()
    observed = ObservedAddresses(clock=clock)
    a = peer()
    # three peers in one /24 are one witness; the same peer twice is one peer
    for observer in (a, a, peer(), peer()):
        observed.record(observer, "198.51.100.10", "/ip4/203.0.113.7/tcp/51000")
    observed.record(peer(), "192.0.2.1", "203.0.113.7:40000")
    observed.record(peer(), "192.0.2.99", "/ip4/203.0.113.99/tcp/40000")
    best, other = observed.candidates()
    assert (best.ip, best.observers, best.peers) == ("203.0.113.7", 2, 4)
    assert (other.ip, other.observers) == ("203.0.113.99", 1)
    assert observed.current == "203.0.113.7"
    assert observed.observers_of("203.0.113.7") == 2


def test_loopback_and_unspecified_observations_are_ignored_on_a_real_network() -> None:
    observed = ObservedAddresses(loopback_host=False)
    for bad in ("/ip4/127.0.0.1/tcp/1", "/ip4/0.0.0.0/tcp/1", "/ip6/fe80::1/tcp/1", "junk"):
        assert observed.record(peer(), "198.51.100.10", bad) is None
    assert observed.candidates() == []
    assert observed.current is None
    loopback = ObservedAddresses(loopback_host=True)  # a swarm inside one computer
    assert loopback.record(peer(), "127.0.0.1", "/ip4/127.0.0.1/tcp/1") is not None
    assert loopback.current == "127.0.0.1"


def test_closed_observations_are_forgotten_after_a_while() -> None:
    clock = FakeClock()
    observed = ObservedAddresses(forget_after=60.0, clock=clock)
    token = observed.record(peer(), "198.51.100.10", "203.0.113.7:1")
    assert token is not None
    observed.closed(token)
    clock.advance(30)
    assert [c.open for c in observed.candidates()] == [0]
    clock.advance(31)
    assert observed.candidates() == []


def test_a_change_of_the_observed_ip_is_reported() -> None:
    changes: list[tuple[str | None, str | None]] = []
    observed = ObservedAddresses(on_change=lambda old, new: changes.append((old, new)))
    home = [observed.record(peer(), "198.51.100.10", "203.0.113.7:1") for _ in range(2)]
    assert changes == [(None, "203.0.113.7")]
    for token in home:  # the laptop left home: its connections dropped
        assert token is not None
        observed.closed(token)
    observed.record(peer(), "192.0.2.1", "/ip4/198.18.0.5/tcp/2")  # the café's address
    assert changes[-1] == ("203.0.113.7", "198.18.0.5")
    assert observed.current == "198.18.0.5"


# ---- connection kinds ----------------------------------------------------------------------------


def test_connection_kinds_count_peers_by_their_best_connection() -> None:
    a, b, c, d = peer(), peer(), peer(), peer()

    def conn(who: Any, relay: Any = None, **extra: Any) -> Any:
        return SimpleNamespace(peer=who, relayed_via=relay, is_usable=True, **extra)

    relay = peer()
    conns = [
        conn(a),
        conn(b, relay),
        conn(b),  # b: both; counts as direct
        conn(c, relay),
        conn(d, punched=True),
        SimpleNamespace(peer=d, relayed_via=None, is_usable=False),  # closing: ignored
    ]
    host = SimpleNamespace(connections=lambda: conns)
    assert connection_kinds(host) == {  # type: ignore[arg-type]
        "direct": 2,
        "punched": 1,
        "relayed": 1,
        "peers": 4,
    }
