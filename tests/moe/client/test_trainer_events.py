"""A DMoE trainer's JSON lines: written and read back; broken lines refused; the swarm's line made
from what the trainers and servers reported."""

from __future__ import annotations

import json

import pytest

from core.moe.client.trainer_events import (
    MoEAccuracy,
    MoEProgress,
    MoETrainerReady,
    report_from_json,
    to_json,
)
from core.swarm.dmoe_run import DmoeStanding
from core.util.errors import WireFormatError

PROGRESS = MoEProgress(
    steps=40,
    samples=1280,
    loss=1.25,
    samples_per_second=300.0,
    failed=2,
    staleness=1.5,
    experts_answered=0.98,
)


def test_reports_go_through_a_json_line_and_back() -> None:
    for event in (PROGRESS, MoEAccuracy(steps=50, accuracy=0.9)):
        assert report_from_json(json.loads(json.dumps(to_json(event)))) == event
    ready = to_json(MoETrainerReady("/ip4/127.0.0.1/tcp/1/p2p/x"))
    assert ready == {
        "event": "ready",
        "address": "/ip4/127.0.0.1/tcp/1/p2p/x",
        "role": "moe-trainer",
    }
    assert report_from_json(ready) is None
    assert report_from_json(["not", "an", "object"]) is None


@pytest.mark.parametrize(
    "change", [{"loss": "low"}, {"steps": None}, {"failed": True}, {"staleness": [1]}]
)
def test_a_broken_report_is_refused_with_the_field_named(change: dict[str, object]) -> None:
    line = {**to_json(PROGRESS), **change}
    (name,) = change
    with pytest.raises(WireFormatError, match=name):
        report_from_json(line)
    missing = to_json(PROGRESS)
    del missing["samples"]
    with pytest.raises(WireFormatError, match="samples"):
        report_from_json(missing)


def test_the_swarm_line_combines_the_trainers_latest_reports() -> None:
    standing = DmoeStanding()
    assert standing.line(1.0) is None
    standing.losses["trainer-0"] = PROGRESS
    standing.losses["trainer-1"] = MoEProgress(60, 1920, 0.75, 100.0, 0, 2.5, 0.9)
    standing.served["experts-0"] = 1000
    standing.served["experts-1"] = 24
    line = standing.line(12.0)
    assert line is not None
    assert (line.steps, line.loss, line.samples_per_second) == (100, 1.0, 400.0)
    assert (line.answered, line.failed, line.trainers, line.expert_samples) == (0.9, 2, 2, 1024)
    assert line.accuracy is None
    standing.accuracy["trainer-1"] = MoEAccuracy(60, 0.8)
    standing.accuracy["trainer-0"] = MoEAccuracy(40, 0.6)
    assert standing.line(13.0).accuracy == pytest.approx(0.7)  # type: ignore[union-attr]
