"""The peer's typed events: their JSON lines (what ``barnraise peer`` prints and ``barnraise swarm``
reads back) round-trip, malformed lines are refused with the field named, and the engine reads them
without loading torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.util.errors import WireFormatError
from core.worker.events import (
    PeerEpoch,
    PeerEvent,
    PeerFailed,
    PeerMetrics,
    PeerNetwork,
    PeerReady,
    PeerStopped,
    from_json,
    to_json,
)

ROOT = Path(__file__).resolve().parents[2]

EVENTS: list[PeerEvent] = [
    PeerReady("/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWPeer", "backbone"),
    PeerEpoch(12, 256, 3, True, "averaged 3 of 3 parts", 1.25),
    PeerMetrics(12, 4.5, 1024, 310.5, 3, 1_700_000_000.0, {"alice": 512, "bob": 512}),
    PeerMetrics(13, None, 1024, 300.0, 2, 1_700_000_004.0),
    PeerFailed("the data server does not answer"),
    PeerStopped(),
    PeerStopped(640, 412.5, 431.25, 3_500_000, 7_100_000),
    PeerNetwork("private", None, 1_700_000_000.0, peers=4, direct=3, relayed=1),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_survives_its_json_line(event: PeerEvent) -> None:
    line = json.dumps(to_json(event))
    assert from_json(json.loads(line)) == event


def test_the_json_lines_keep_their_names_and_fields() -> None:
    assert to_json(EVENTS[0]) == {
        "event": "ready",
        "address": "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWPeer",
        "role": "backbone",
    }
    assert to_json(EVENTS[4]) == {"event": "failed", "message": "the data server does not answer"}
    assert to_json(EVENTS[6]) == {
        "event": "stopped",
        "samples": 640,
        "compute_seconds": 412.5,
        "seconds": 431.25,
        "bytes_sent": 3_500_000,
        "bytes_received": 7_100_000,
    }
    assert from_json({"event": "ready", "address": "127.0.0.1:1"}) == PeerReady("127.0.0.1:1")


def test_a_stopped_line_without_figures_reads_as_zeros() -> None:
    # an older peer's line, or the expert host's, which counts nothing of the kind
    assert from_json({"event": "stopped"}) == PeerStopped(0, 0.0, 0.0, 0, 0)
    assert from_json({"event": "stopped", "saved": ["ffn.0.1"]}) == PeerStopped()


def test_fields_from_a_newer_peer_are_ignored() -> None:
    line = {**to_json(EVENTS[1]), "rounds_skipped": 2}
    assert from_json(line) == EVENTS[1]


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ({**to_json(EVENTS[2]), "loss": "high"}, "PeerMetrics.loss"),
        ({"event": "metrics", "epoch": 2}, "PeerMetrics needs at least 6 fields"),
        ({**to_json(EVENTS[1]), "samples": 2.5}, "PeerEpoch.samples"),
        ({**to_json(EVENTS[6]), "compute_seconds": "long"}, "PeerStopped.compute_seconds"),
        ({**to_json(EVENTS[2]), "contributions": {"alice": "many"}}, "contributions"),
        ({"event": "exploded"}, "unknown peer event 'exploded'"),
        ({"address": "127.0.0.1:1"}, "unknown peer event None"),
        (["ready"], "a peer event is a JSON object"),
    ],
)
def test_malformed_lines_are_refused_naming_what_is_wrong(line: Any, says: str) -> None:
    with pytest.raises(WireFormatError, match=re.escape(says)):
        from_json(line)


def test_the_engine_reads_peer_events_without_torch() -> None:
    # in a fresh interpreter: in this one, other tests may have loaded torch already
    code = (
        "import sys\n"
        "import core.control, core.engine, core.engine.peer_events, core.worker.events\n"
        "sys.exit('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=60, check=False
    )
    assert result.returncode == 0, "importing the engine loaded torch"
