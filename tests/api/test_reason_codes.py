"""Reason codes on the wire: a client reads a code a newer engine added as ``"unknown"`` and keeps the
engine's reason, in answers and in events, while strict decoding (the engine's, of requests) still
refuses it; known codes and other fields are untouched."""

from __future__ import annotations

from typing import Any

import pytest

from core.api import UNKNOWN_CODE, EngineState, Event, Progress, StateChanged
from core.api.codec import decode, encode
from core.api.errors import BadRequest

STATE = EngineState(
    api_version=1,
    engine_version="9.0.0",
    pid=42,
    state="waiting",
    code="busy",
    reason="Waiting: other programs are busy (87% CPU)",
    since=1_700_000_000.0,
    contribute=True,
    user_paused=False,
    snoozed_until=None,
    project=None,
    progress=Progress(),
    threads=3,
    duty=0.0,
)


def with_code(data: dict[str, Any], code: Any) -> dict[str, Any]:
    return {**data, "code": code}


def test_a_known_code_decodes_as_itself() -> None:
    assert decode(EngineState, encode(STATE), strict=False) == STATE
    assert decode(EngineState, encode(STATE), strict=True) == STATE


def test_an_unknown_code_reads_as_unknown_with_the_engines_reason() -> None:
    newer = with_code(encode(STATE), "solar_eclipse")
    state = decode(EngineState, newer, strict=False)
    assert state.code == UNKNOWN_CODE
    assert state.reason == "Waiting: other programs are busy (87% CPU)"
    assert state.state == "waiting"


def test_strict_decoding_still_refuses_an_unknown_code() -> None:
    with pytest.raises(BadRequest, match=r"EngineState\.code: must be one of"):
        decode(EngineState, with_code(encode(STATE), "solar_eclipse"), strict=True)


@pytest.mark.parametrize("bad", [7, None, ["busy"]])
def test_a_code_that_is_not_text_is_malformed_even_for_a_client(bad: Any) -> None:
    with pytest.raises(BadRequest, match="code"):
        decode(EngineState, with_code(encode(STATE), bad), strict=False)


def test_an_event_with_an_unknown_code_keeps_its_reason() -> None:
    change = StateChanged("paused", "running", "on_battery", "Paused: on battery")
    wire = Event(5, 1_700_000_000.0, change).to_wire()
    assert Event.from_wire(wire, strict=False).data == change
    wire["data"]["code"] = "battery_swap"
    event = Event.from_wire(wire, strict=False)
    assert event.data == StateChanged("paused", "running", UNKNOWN_CODE, "Paused: on battery")
    with pytest.raises(BadRequest, match="code"):
        Event.from_wire(wire, strict=True)
