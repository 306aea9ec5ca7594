"""The churn soak, two minutes of it: a backbone and up to three trainers as OS processes on loopback,
trainers leaving (SIGTERM and SIGKILL) and joining at random, with 20 seconds in the middle when none
runs. The soak itself judges the run (``benchmarks/swarm/churn.py``, whose ten-minute version is the
benchmark): every step taken on 1.0-1.2x the target batch, the epochs one unbroken sequence across
the gap, the loss going on where it stopped, no trainer waiting more than 30 s for the state, no
honest trainer accused, and the backbone's memory flat."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.leaks import leftover

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.name == "nt", reason="uses POSIX signals")


@pytest.mark.slow
@pytest.mark.timeout(900)  # two minutes of churn; startup and shutdown on a busy machine
def test_the_collaboration_survives_two_minutes_of_churn(tmp_path: Path, demo_data: Path) -> None:
    out = tmp_path / "churn.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.swarm.churn",
            "--minutes",
            "2",
            "--trainers",
            "3",
            "--gap",
            "20",
            "--target-batch-size",
            "256",
            "--no-baseline",
            "--data",
            str(demo_data),
            "--no-newcomer",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=840,
        env=os.environ | {"TMPDIR": str(tmp_path)},  # its work folder, checked for leftovers below
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    soak = json.loads(out.read_text())["soak"]
    # the record as text (pytest shortens a dict it prints, and a failure here is read in CI),
    # less the backbone's memory timeline
    memory = {k: v for k, v in soak["backbone_rss_mb"].items() if k != "timeline"}
    figures = json.dumps(soak | {"backbone_rss_mb": memory})
    assert soak["checks"] == {
        "epochs_all_reported": True,
        "credit_exact": True,
        "epoch_sizes": True,
        "epochs_continuous": True,
        "loss_continuous": True,
        "waits": True,
        "nobody_accused": True,
        "backbone_memory_flat": True,
    }, figures
    # it trained before and after the gap (how many epochs it made is the machine's speed: beside
    # two busy loops and a NAT-lab test it made 5)
    (before, _), (after, _) = soak["loss_before_gap"], soak["loss_after_gap"]
    assert before < after, figures
    assert soak["trainers_started"] >= 4, figures
    assert any(how == "gap" for _, how, _ in soak["churn"])
    assert leftover(str(tmp_path)) == []


@pytest.mark.parametrize(
    ("check_at", "evaluation_at", "judged"),
    [
        (20.0, 50.0, (60.0, 138.0)),  # both early (a quiet machine): after the later
        (45.0, 70.0, (80.0, 138.0)),  # both late (CI beside busy loops): still after the later
        (None, 50.0, (60.0, 138.0)),  # no check recomputed anything: after the evaluation
        (20.0, 120.0, (24.0, 118.0)),  # the evaluation near the end: between the two
        (100.0, 110.0, (0.0, 96.0)),  # both near the end: before the first
    ],
)
def test_the_memory_is_judged_apart_from_the_backbones_one_time_steps(
    tmp_path: Path, check_at: float | None, evaluation_at: float, judged: tuple[float, float]
) -> None:
    """One sample every 2 s for 140 s; the check ends at ``check_at`` after 1.5 s, the evaluation
    takes 7 s from ``evaluation_at``: the longest stretch clear of both is judged."""
    from benchmarks.swarm.churn import Swarm, settled_memory
    from core.training.credit.metrics import MetricsLog
    from core.training.peer.roles import CHECKS_LOG

    swarm = Swarm("", tmp_path, 256, tmp_path / "manifest.toml")
    swarm.memory = [(float(at), 400.0) for at in range(0, 140, 2)]
    swarm.evaluations = [(evaluation_at, evaluation_at + 7)]
    if check_at is not None:
        log = MetricsLog(tmp_path / "backbone" / CHECKS_LOG)
        log.write_record({"time": swarm.started_wall + check_at, "seconds": 1.5, "compute": 0.4})
        log.write_record({"time": swarm.started_wall + 5.0, "seconds": 0.5, "compute": 0.0})
    kept = [at for at, _ in settled_memory(swarm)]
    assert (kept[0], kept[-1]) == judged


@pytest.mark.parametrize(
    ("how", "credited", "checks", "held"),
    [
        # the last epoch's check found it killed, the one before passed: that epoch is held
        ("SIGKILL", {3: 256}, [(3, "passed", 104.0), (4, "unreached", 111.0)], 256),
        # a newcomer killed before its first check passed: both epochs held
        ("SIGKILL", {}, [(3, "unreached", 111.0)], 512),
        # the check failed to reach it before it was killed: not the rule, inexact
        ("SIGKILL", {3: 256}, [(3, "passed", 104.0), (4, "unreached", 108.0)], 0),
        # an epoch short at or before the last passed check: not the rule
        ("SIGKILL", {4: 256}, [(4, "passed", 112.0), (4, "unreached", 111.0)], 0),
        # no check of it came after the kill: nothing explains the shortfall
        ("SIGKILL", {3: 256}, [(3, "passed", 104.0)], 0),
        # a check of an epoch it never stepped
        ("SIGKILL", {3: 256}, [(3, "passed", 104.0), (7, "unreached", 111.0)], 0),
        # stopped on SIGTERM, it lingers to answer its checks: nothing is held by this rule
        ("SIGTERM", {3: 256}, [(3, "passed", 104.0), (4, "unreached", 111.0)], 0),
        # paid in full: nothing held
        ("SIGKILL", {3: 256, 4: 256}, [(3, "passed", 104.0), (4, "unreached", 111.0)], 0),
    ],
)
def test_credit_held_by_a_check_that_found_its_trainer_killed_is_told_apart(
    tmp_path: Path,
    how: str,
    credited: dict[int, int],
    checks: list[tuple[int, str, float]],
    held: int,
) -> None:
    """A trainer that stepped epochs 3 and 4 (256 samples each) and was stopped at 109.7 s."""
    from typing import Any, cast

    from benchmarks.swarm.churn import Swarm, Trainer, held_by_a_check_it_missed
    from core.worker.events import PeerEpoch

    swarm = Swarm("", tmp_path, 256, tmp_path / "manifest.toml")
    trainer = Trainer("p6", cast(Any, None), 85.0, peer="12D3KooWp6", how_stopped=how)
    trainer.epochs = [PeerEpoch(e, 256, 1, True, "", 1.0, 256.0) for e in (3, 4)]
    trainer.stopped_at = 109.7
    records = [
        {"time": swarm.started_wall + at, "epoch": epoch, "peer": "12D3KooWp6", "verdict": verdict}
        for epoch, verdict, at in checks
    ]
    assert held_by_a_check_it_missed(swarm, trainer, credited, records) == held
