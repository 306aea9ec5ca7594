"""The model outlives its volunteers across home routers, as a new user would find it.

A backbone (``barnraise aux``, default arguments) on the public host; a volunteer in one home trains
a few epochs and quits (SIGTERM); a while later a new volunteer starts in the other home, behind
another router. It downloads the state from the backbone through its router and goes on from the
epoch where the first one stopped, without ever waiting for the state, and the collaboration's
metrics go on from the same epoch.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.lab.conftest import MakeLab
from tests.lab.procs import LabProcess, peer_args

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(420)]


def test_a_newcomer_goes_on_where_the_last_volunteer_stopped(
    make_lab: MakeLab,
    project: Path,
    tmp_path: Path,
) -> None:
    lab = make_lab("cone", "symmetric")
    aux = LabProcess(
        lab, "pub", ["backbone", *peer_args(project, tmp_path / "aux")], tmp_path / "backbone.log"
    )
    backbone = aux.wait_for(lambda e: e.get("event") == "ready", 120)["address"]
    first = LabProcess(
        lab,
        "h1",
        ["peer", *peer_args(project, tmp_path / "h1", "--initial-peers", backbone)],
        tmp_path / "h1.log",
    )
    first.wait_for(lambda e: e.get("event") == "epoch" and e["epoch"] >= 3, 300)
    first.proc.send_signal(signal.SIGTERM)
    first.wait_for(lambda e: e.get("event") == "stopped", 60)
    assert first.proc.wait(30) == 0
    last = max(e["epoch"] for e in first.events if e.get("event") == "epoch")
    time.sleep(5.0)  # nobody trains now; the departed volunteer's record was withdrawn

    second = LabProcess(
        lab,
        "h2",
        ["peer", *peer_args(project, tmp_path / "h2", "--initial-peers", backbone)],
        tmp_path / "h2.log",
    )
    started = time.monotonic()
    epoch = second.wait_for(lambda e: e.get("event") == "epoch", 300)
    assert epoch["epoch"] == last + 1, (
        epoch,
        last,
    )  # not epoch 0: the state came from the backbone
    assert epoch["samples"] > 0
    assert time.monotonic() - started < 120
    assert not [e for e in second.events if e.get("event") == "waiting"], second.events
    # the backbone's metrics go on from the same epoch: nothing restarted
    metrics = aux.wait_for(lambda e: e.get("event") == "metrics" and e["epoch"] > last, 120)
    assert metrics["epoch"] == last + 1
