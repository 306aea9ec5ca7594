"""``benchmarks/learning/lowcomm_lab.py`` still runs in the lab and writes both modes side by
side: the fields, not their values (fifteen seconds of the demo model per mode on a shared machine
prove nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lab.natlab import lab_namespaces

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(420)]


def test_the_benchmark_writes_both_modes_and_leaves_no_namespace(
    lab_support: str | None, demo_data: Path, tmp_path: Path
) -> None:
    if lab_support is not None:
        pytest.skip(lab_support)
    out = tmp_path / "lowcomm_lab.json"
    argv = [
        sys.executable, "-m", "benchmarks.learning.lowcomm_lab", "--preset", "demo",
        "--minutes", "0.25", "--round-seconds", "5", "--target-batch", "64",
        "--data", str(demo_data), "--json", str(out),
    ]  # fmt: skip
    with subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT
    ) as proc:
        _, errors = proc.communicate(timeout=360)
    assert proc.returncode == 0, errors[-4000:]
    assert lab_namespaces(proc.pid) == []
    result = json.loads(out.read_text())
    assert list(result["modes"]) == ["dedloc", "diloco"]
    for mode in result["modes"].values():
        assert set(mode["volunteers"]) == {"h1", "h2", "h3"}
        for volunteer in mode["volunteers"].values():
            assert 0 < volunteer["compute_fraction"] <= 1
            assert volunteer["samples"] > 0
            assert volunteer["bytes_sent"] > 0
            assert volunteer["link_tx_bytes"] > 0
    assert set(result["compute_fraction"]) == {"dedloc", "diloco"}
    assert set(result["goals"]) == {
        "diloco_compute_fraction_at_least_0_95",
        "diloco_loss_below_dedloc",
    }
    assert "training loss" in result["loss_kind"]
