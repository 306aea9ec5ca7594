"""A connection's life as one state: the legal moves, the impossible ones, and what each phase allows.

Pure: no loop, no sockets. ``test_connection_phase`` checks that ``Connection`` follows these moves.
"""

from __future__ import annotations

import contextlib

import pytest

from core.net.wire.lifecycle import Event, IllegalTransition, Phase, accepts_new_calls, advance

LIVE = [Phase.HANDSHAKE, Phase.GREETING, Phase.OPEN, Phase.PEER_LEAVING, Phase.CLOSING]


def successors(phase: Phase) -> dict[Event, Phase]:
    """Where each event that can happen in ``phase`` leads."""
    out = {}
    for event in Event:
        with contextlib.suppress(IllegalTransition):
            out[event] = advance(phase, event)
    return out


def walk(*events: Event, start: Phase = Phase.HANDSHAKE) -> Phase:
    phase = start
    for event in events:
        phase = advance(phase, event)
    return phase


def test_an_ordinary_life_from_handshake_to_closed() -> None:
    phase = Phase.HANDSHAKE
    seen = [phase]
    for event in (Event.ATTACHED, Event.HELLO, Event.CLOSE, Event.LOST):
        phase = advance(phase, event)
        seen.append(phase)
    assert seen == [Phase.HANDSHAKE, Phase.GREETING, Phase.OPEN, Phase.CLOSING, Phase.CLOSED]


def test_a_peer_that_leaves_gets_no_new_calls_but_its_own_are_still_served() -> None:
    phase = walk(Event.ATTACHED, Event.HELLO, Event.GOAWAY)
    assert phase is Phase.PEER_LEAVING
    assert not accepts_new_calls(phase, initiator=True)
    assert not accepts_new_calls(phase, initiator=False)
    assert not phase.closing  # the peer may still finish calls it opens
    assert advance(phase, Event.GOAWAY) is Phase.PEER_LEAVING  # saying it twice changes nothing
    assert advance(phase, Event.CLOSE) is Phase.CLOSING


def test_only_the_dialing_side_calls_before_the_peers_hello() -> None:
    assert accepts_new_calls(Phase.GREETING, initiator=True)
    assert not accepts_new_calls(Phase.GREETING, initiator=False)
    for initiator in (True, False):
        assert accepts_new_calls(Phase.OPEN, initiator=initiator)
        assert not accepts_new_calls(Phase.HANDSHAKE, initiator=initiator)
        for phase in (Phase.PEER_LEAVING, Phase.CLOSING, Phase.ABORTED, Phase.CLOSED):
            assert not accepts_new_calls(phase, initiator=initiator)


def test_closing_and_deaf_phases() -> None:
    assert {p for p in Phase if p.closing} == {Phase.CLOSING, Phase.ABORTED, Phase.CLOSED}
    assert {p for p in Phase if p.deaf} == {Phase.ABORTED, Phase.CLOSED}


def test_a_hello_that_comes_after_we_started_closing_changes_nothing() -> None:
    closing = walk(Event.ATTACHED, Event.CLOSE)
    assert closing is Phase.CLOSING
    assert advance(closing, Event.HELLO) is Phase.CLOSING
    assert advance(closing, Event.GOAWAY) is Phase.CLOSING
    assert advance(closing, Event.CLOSE) is Phase.CLOSING


@pytest.mark.parametrize("phase", [*LIVE, Phase.ABORTED])
def test_every_phase_but_closed_can_be_dropped_and_lost(phase: Phase) -> None:
    assert advance(phase, Event.ABORT) is Phase.ABORTED
    assert advance(phase, Event.LOST) is Phase.CLOSED


def test_an_abort_before_attaching_drops_the_transport_when_it_comes() -> None:
    assert walk(Event.ABORT, Event.ATTACHED) is Phase.ABORTED
    assert walk(Event.ABORT, Event.CLOSE) is Phase.ABORTED


def test_a_link_lost_before_attaching_stays_closed() -> None:
    assert walk(Event.LOST, Event.ATTACHED) is Phase.CLOSED
    assert walk(Event.LOST, Event.ABORT) is Phase.CLOSED


@pytest.mark.parametrize(
    ("phase", "event"),
    [
        (Phase.HANDSHAKE, Event.HELLO),  # frames wait until the peer is proven
        (Phase.HANDSHAKE, Event.GOAWAY),
        (Phase.HANDSHAKE, Event.CLOSE),  # only an attached connection can say goodbye
        (Phase.GREETING, Event.ATTACHED),  # attached twice
        (Phase.GREETING, Event.GOAWAY),  # the peer's hello comes first
        (Phase.OPEN, Event.HELLO),  # a second hello is refused as a protocol violation first
        (Phase.OPEN, Event.ATTACHED),
        (Phase.PEER_LEAVING, Event.HELLO),
        (Phase.CLOSING, Event.ATTACHED),
        (Phase.ABORTED, Event.HELLO),  # a dropped connection reads nothing more
        (Phase.ABORTED, Event.GOAWAY),
        (Phase.CLOSED, Event.LOST),  # lost once only
        (Phase.CLOSED, Event.CLOSE),
        (Phase.CLOSED, Event.HELLO),
        (Phase.CLOSED, Event.GOAWAY),
    ],
)
def test_impossible_events_raise_naming_the_event_and_the_phase(phase: Phase, event: Event) -> None:
    with pytest.raises(IllegalTransition, match=f"cannot take {event.name} while {phase.label}"):
        advance(phase, event)


def test_once_closing_a_connection_never_accepts_calls_again() -> None:
    for phase in (p for p in Phase if p.closing):
        for event, after in successors(phase).items():
            assert after.closing, (phase, event, after)


def test_a_dropped_connection_only_goes_on_to_closed() -> None:
    assert set(successors(Phase.ABORTED).values()) == {Phase.ABORTED, Phase.CLOSED}
    assert set(successors(Phase.CLOSED).values()) == {Phase.CLOSED}


def test_every_phase_is_reachable_from_the_handshake() -> None:
    reached, frontier = {Phase.HANDSHAKE}, [Phase.HANDSHAKE]
    while frontier:
        for after in successors(frontier.pop()).values():
            if after not in reached:
                reached.add(after)
                frontier.append(after)
    assert reached == set(Phase)
