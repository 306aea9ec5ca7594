"""The progress record's wire form with the backbone's held-out evaluation: round trips (with and
without the unigram floor), only the backbone's records carry one, values out of bounds make the
record malformed, and what a reader of the form without evaluations makes of it (it drops the
record). The backbone's role travels as "aux", the name older readers know."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from core.config.roles import BACKBONE
from core.training.progress import MAX_HELD_OUT_LOSS, HeldOut, PeerProgress
from core.util.errors import WireFormatError
from core.worker.events import PeerEvaluation

HELD_OUT = HeldOut(12, 3.25, 0.41, 256)


def aux(held_out: HeldOut | None = HELD_OUT, **changes: Any) -> PeerProgress:
    record = PeerProgress("aux-peer", 13, 0, 0.0, 1_700_000_000.0, BACKBONE, held_out=held_out)
    return dataclasses.replace(record, **changes)


def test_the_backbones_record_round_trips_with_its_evaluation() -> None:
    record = aux()
    wire = record.to_wire()
    assert len(wire) == 13
    assert wire[4] == "aux"  # the backbone's role, as every release writes it
    assert wire[11] is None  # no pass in an open project: nil holds its place
    assert wire[12] == [12, 3.25, 0.41, 256]
    assert PeerProgress.from_wire("aux-peer", wire) == record
    unknown = aux(HeldOut(12, None, 0.0, 0))
    assert PeerProgress.from_wire("aux-peer", unknown.to_wire()) == unknown


def test_an_evaluation_carries_its_floor_and_reads_without_one() -> None:
    floored = aux(HeldOut(12, 3.25, 0.41, 256, 6.24))
    wire = floored.to_wire()
    assert wire[12] == [12, 3.25, 0.41, 256, 6.24]
    read = PeerProgress.from_wire("aux-peer", wire)
    assert read == floored
    assert read is not None
    assert read.held_out is not None
    assert read.held_out.floor == 6.24
    # a backbone without a floor sends the four values an older reader knows
    assert aux().to_wire()[12] == [12, 3.25, 0.41, 256]
    assert HeldOut.from_wire([12, 3.25, 0.41, 256]).floor is None
    # a nil floor is as good as none, and an integer one reads as a number
    assert HeldOut.from_wire([12, None, 0.41, 256, None]) == HeldOut(12, None, 0.41, 256)
    assert HeldOut.from_wire([1, 3, 0, 2, 6]) == HeldOut(1, 3.0, 0.0, 2, 6.0)


def test_a_record_without_an_evaluation_keeps_the_shorter_form() -> None:
    assert len(aux(None).to_wire()) == 11
    assert PeerProgress.from_wire("aux-peer", aux(None).to_wire()) == aux(None)


def test_only_the_backbones_records_carry_an_evaluation() -> None:
    # a withdrawing backbone's record ("left") and a trainer's never send one
    for role in ("left", "trainer", "paused"):
        assert len(aux(role=role).to_wire()) == 11
    # and a reader ignores one that another kind of record carries
    wire = [*aux(None, role="trainer").to_wire(), None, HELD_OUT.to_wire()]
    read = PeerProgress.from_wire("p", wire)
    assert read is not None
    assert (read.role, read.held_out) == ("trainer", None)


def test_a_role_no_release_writes_makes_the_record_malformed() -> None:
    wire = aux(None).to_wire()
    for unknown in ("backbone", "auxiliary", "", 3, None):
        assert PeerProgress.from_wire("p", [*wire[:4], unknown, *wire[5:]]) is None


@pytest.mark.parametrize(
    "held_out",
    [
        [-1, 3.0, 0.5, 1],  # a negative epoch
        [1, 3.0, 0.5, -1],  # negative samples
        [1.5, 3.0, 0.5, 1],  # not a whole number
        [True, 3.0, 0.5, 1],
        [1, math.inf, 0.5, 1],
        [1, math.nan, 0.5, 1],
        [1, -0.1, 0.5, 1],
        [1, MAX_HELD_OUT_LOSS * 2, 0.5, 1],
        [1, 3.0, 1.5, 1],  # accuracy beyond 1
        [1, 3.0, -0.5, 1],
        [1, 3.0, None, 1],
        [1, "3.0", 0.5, 1],
        [1, 3.0, 0.5],  # a value short
        [1, 3.0, 0.5, 1, 6.2, 9],  # one beyond the floor
        [1, 3.0, 0.5, 1, -0.5],  # a floor out of the loss's bounds
        [1, 3.0, 0.5, 1, MAX_HELD_OUT_LOSS * 2],
        [1, 3.0, 0.5, 1, math.inf],
        [1, 3.0, 0.5, 1, math.nan],
        [1, 3.0, 0.5, 1, "6.2"],
        [1, 3.0, 0.5, 1, True],
        "12,3.0,0.5,1",
    ],
)
def test_an_evaluation_out_of_bounds_makes_the_record_malformed(held_out: Any) -> None:
    wire = [*aux(None).to_wire(), None, held_out]
    assert PeerProgress.from_wire("aux-peer", wire) is None
    with pytest.raises(WireFormatError):
        HeldOut.from_wire(held_out)


def test_malformed_shapes_are_still_refused() -> None:
    short = aux(None).to_wire()
    assert PeerProgress.from_wire("p", short[:10]) is None
    assert PeerProgress.from_wire("p", [*short, None]) is None  # a nil pass and nothing after it
    assert PeerProgress.from_wire("p", [*short, None, HELD_OUT.to_wire(), 1]) is None
    assert PeerProgress.from_wire("p", [*short, [1, 2], HELD_OUT.to_wire()]) is None  # no pass
    assert PeerProgress.from_wire("p", {"epoch": 1}) is None


def test_reading_does_not_change_the_value_read() -> None:
    wire = aux().to_wire()
    kept = list(wire)
    PeerProgress.from_wire("aux-peer", wire)
    assert wire == kept


def old_reader(value: Any) -> tuple[Any, Any] | None:
    """How ``PeerProgress.from_wire`` shaped a value in the form without evaluations: a twelfth
    value is the pass, and then exactly the eleven fields must be left (else it is malformed)."""
    if isinstance(value, list) and len(value) == 12:
        value = value[:11]
    if not isinstance(value, list) or len(value) != 11:
        return None
    return value[0], value[4]


def test_a_reader_without_evaluations_drops_the_record_rather_than_misread_it() -> None:
    assert old_reader(aux(None).to_wire()) == (13, "aux")  # no evaluation: read as before
    assert old_reader(aux().to_wire()) is None


def test_the_backbones_result_becomes_figures_within_the_bounds() -> None:
    result = PeerEvaluation(7, 2.5, 0.625, 64, 8192, 3.5, 1_700_000_000.0)
    assert HeldOut.of(result) == HeldOut(7, 2.5, 0.625, 64)
    diverged = PeerEvaluation(7, 5e4, 0.0, 64, 8192, 3.5, 1_700_000_000.0)
    assert HeldOut.of(diverged).loss is None
    assert HeldOut.of(PeerEvaluation(7, None, 0.5, 64, 1, 1.0, 0.0)).loss is None
    floored = PeerEvaluation(7, 2.5, 0.625, 64, 8192, 3.5, 1_700_000_000.0, floor=6.25)
    assert HeldOut.of(floored) == HeldOut(7, 2.5, 0.625, 64, 6.25)
    # a floor beyond the bounds travels as unknown, like such a loss
    for floor in (math.inf, math.nan, -1.0, 5e4):
        wild = dataclasses.replace(floored, floor=floor)
        assert HeldOut.of(wild).floor is None
