"""The engine's state from a decision and its peer's status (``core.policy.outcome``), and the codes'
types: every code the policy or the engine can produce is a ``ReasonCode``."""

from __future__ import annotations

from typing import get_args

import pytest

from core.policy import (
    STARTING,
    UNKNOWN_CODE,
    WAITING_CODES,
    Decision,
    EngineCode,
    Outcome,
    PeerStatus,
    PolicyCode,
    ReasonCode,
    outcome,
)

RUN = Decision("run", "running", "Contributing", 3, 1.0)
THROTTLE = Decision("throttle", "throttled", "Running slowly: you are using the computer", 3, 0.5)
READY = PeerStatus("ready")


def pause(code: PolicyCode, reason: str = "Some reason") -> Decision:
    return Decision("pause", code, reason, 3, 0.0)


@pytest.mark.parametrize(
    ("code", "state"),
    [
        ("no_project", "idle"),
        ("not_opted_in", "paused"),
        ("user_paused", "paused"),
        ("snoozed", "paused"),
        ("on_battery", "paused"),
        ("network_cap", "paused"),
        ("outside_window", "waiting"),
        ("user_active", "waiting"),
        ("busy", "waiting"),
        ("low_memory", "waiting"),
        ("gpu_hot", "waiting"),
    ],
)
def test_a_pause_says_so_whatever_the_peer_does(code: PolicyCode, state: str) -> None:
    for peer in (None, READY, PeerStatus("failed", "it broke")):
        assert outcome(pause(code, "In words"), peer) == Outcome(state, code, "In words")


def test_every_pause_code_is_placed() -> None:
    pauses = set(get_args(PolicyCode)) - {"running", "throttled"}
    assert pauses > WAITING_CODES
    assert {outcome(pause(code), None).state for code in pauses} == {"idle", "paused", "waiting"}


def test_running_and_throttled_need_a_ready_peer() -> None:
    assert outcome(RUN, READY) == Outcome("running", "running", "Contributing")
    assert outcome(THROTTLE, READY) == Outcome("throttled", "throttled", THROTTLE.reason)


@pytest.mark.parametrize("peer", [None, PeerStatus("stopped"), PeerStatus("starting")])
def test_a_peer_not_ready_yet_is_starting(peer: PeerStatus | None) -> None:
    assert outcome(RUN, peer) == Outcome("starting", "running", "Starting: joining the swarm")


def test_a_failed_peer_is_an_error_with_its_words() -> None:
    failed = PeerStatus("failed", "the data server does not answer")
    assert outcome(THROTTLE, failed) == Outcome(
        "error", "peer_failed", "Error: the data server does not answer (trying again in a moment)"
    )
    no_login = PeerStatus("failed", "log in with 'barnraise ctl login'", needs_login=True)
    assert outcome(RUN, no_login) == Outcome(
        "error", "login_required", "Not logged in: log in with 'barnraise ctl login'"
    )


def test_a_peer_that_cannot_load_the_state_waits_for_the_collaboration() -> None:
    """Never "Contributing" while nothing the peer computes would count."""
    stuck = PeerStatus("ready", waiting_for="no peer could give the state of epoch 37")
    for decision in (RUN, THROTTLE):
        assert outcome(decision, stuck) == Outcome(
            "waiting",
            "collaboration",
            "Waiting for the collaboration: no peer could give the state of epoch 37",
        )
    # a pause still says why it pauses
    assert outcome(pause("user_paused", "Paused by you"), stuck).code == "user_paused"


def test_the_codes_type_holds_every_code_and_the_fallback() -> None:
    codes = set(get_args(ReasonCode))
    assert set(get_args(PolicyCode)) | set(get_args(EngineCode)) | {UNKNOWN_CODE} == codes
    assert not set(get_args(PolicyCode)) & set(get_args(EngineCode))
    assert STARTING.code in codes
