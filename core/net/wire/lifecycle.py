"""A connection's life as one state: the phases, the events that move it, and the only legal moves.

Pure and I/O-free, in the manner of h11: ``Connection`` keeps one ``Phase`` and passes every event
through ``advance``, which answers the next phase or raises ``IllegalTransition``. An illegal move is
a bug in our code (the connection filters what the peer sends before it becomes an event), so it is
never caught. What callers ask of a connection (may I open a call? is it closing? closed?) is read
from the phase alone.

    HANDSHAKE --ATTACHED--> GREETING --HELLO--> OPEN --GOAWAY--> PEER_LEAVING
    GREETING, OPEN or PEER_LEAVING --CLOSE--> CLOSING
    any phase but CLOSED --ABORT--> ABORTED
    any phase but CLOSED --LOST--> CLOSED

plus the moves that change nothing, listed with why in ``_NEXT``.
"""

from __future__ import annotations

import enum
from types import MappingProxyType


@enum.unique
class Phase(enum.Enum):
    """Where a connection is in its life, and what that means for calls and input."""

    # name = (label, closing: no new calls either way, deaf: the peer's input is discarded unread)
    HANDSHAKE = ("handshake", False, False)
    """TLS is being set up and the peer's identity checked; frames that arrive wait."""
    GREETING = ("greeting", False, False)
    """Our hello is sent, the peer's is not read yet. The dialing side may already open calls."""
    OPEN = ("open", False, False)
    """Both hellos exchanged: calls either way."""
    PEER_LEAVING = ("peer leaving", False, False)
    """The peer said goodbye: we open no new calls on it, but still serve the calls it opens."""
    CLOSING = ("closing", True, False)
    """We said goodbye: no new calls either way; running calls may finish, then the socket closes."""
    ABORTED = ("aborted", True, True)
    """Dropped without waiting (broken protocol, refused access, failed check): input is ignored."""
    CLOSED = ("closed", True, True)
    """The transport is gone; every call on it has failed."""

    def __init__(self, label: str, closing: bool, deaf: bool) -> None:
        # plain attributes, not sets of phases: they are read for every frame received
        self.label = label
        self.closing = closing
        self.deaf = deaf


class Event(enum.Enum):
    """Something that moves a connection's phase."""

    ATTACHED = "attached"
    """The TLS transport is up and the peer proven; our hello goes out."""
    HELLO = "hello"
    """The peer's hello was read and admitted."""
    GOAWAY = "goaway"
    """The peer said it is leaving."""
    CLOSE = "close"
    """We start a graceful close."""
    ABORT = "abort"
    """We drop the connection now."""
    LOST = "lost"
    """The transport reported the connection lost."""


class IllegalTransition(RuntimeError):  # a bug, so deliberately not a BarnraiseError
    """An event that cannot happen in the current phase: a bug in the connection's code."""


_P, _E = Phase, Event

_NEXT = MappingProxyType(
    {
        (_P.HANDSHAKE, _E.ATTACHED): _P.GREETING,
        (_P.HANDSHAKE, _E.ABORT): _P.ABORTED,
        (_P.HANDSHAKE, _E.LOST): _P.CLOSED,
        (_P.GREETING, _E.HELLO): _P.OPEN,
        (_P.GREETING, _E.CLOSE): _P.CLOSING,
        (_P.GREETING, _E.ABORT): _P.ABORTED,
        (_P.GREETING, _E.LOST): _P.CLOSED,
        (_P.OPEN, _E.GOAWAY): _P.PEER_LEAVING,
        (_P.OPEN, _E.CLOSE): _P.CLOSING,
        (_P.OPEN, _E.ABORT): _P.ABORTED,
        (_P.OPEN, _E.LOST): _P.CLOSED,
        (_P.PEER_LEAVING, _E.GOAWAY): _P.PEER_LEAVING,  # a peer may repeat its goodbye
        (_P.PEER_LEAVING, _E.CLOSE): _P.CLOSING,
        (_P.PEER_LEAVING, _E.ABORT): _P.ABORTED,
        (_P.PEER_LEAVING, _E.LOST): _P.CLOSED,
        # we started closing before the peer's hello or goodbye came: they change nothing now
        (_P.CLOSING, _E.HELLO): _P.CLOSING,
        (_P.CLOSING, _E.GOAWAY): _P.CLOSING,
        (_P.CLOSING, _E.CLOSE): _P.CLOSING,
        (_P.CLOSING, _E.ABORT): _P.ABORTED,
        (_P.CLOSING, _E.LOST): _P.CLOSED,
        # the peer broke the protocol while TLS was still being checked: attaching drops it
        (_P.ABORTED, _E.ATTACHED): _P.ABORTED,
        # closing or dropping what is already dropped: the drop stands
        (_P.ABORTED, _E.CLOSE): _P.ABORTED,
        (_P.ABORTED, _E.ABORT): _P.ABORTED,
        (_P.ABORTED, _E.LOST): _P.CLOSED,
        # the link died between the TLS handshake and attaching (the first write then fails), or
        # a late abort finds it gone
        (_P.CLOSED, _E.ATTACHED): _P.CLOSED,
        (_P.CLOSED, _E.ABORT): _P.CLOSED,
    }
)


def advance(phase: Phase, event: Event) -> Phase:
    """The phase after ``event``; ``IllegalTransition`` if that event cannot happen in ``phase``."""
    try:
        return _NEXT[phase, event]
    except KeyError:
        raise IllegalTransition(
            f"a connection cannot take {event.name} while {phase.label}"
        ) from None


def accepts_new_calls(phase: Phase, *, initiator: bool) -> bool:
    """Whether we may open calls: once greeted (the dialing side need not wait for the peer's
    hello, which saves a round trip on every new connection) and until anyone says goodbye."""
    return phase is Phase.OPEN or (phase is Phase.GREETING and initiator)
