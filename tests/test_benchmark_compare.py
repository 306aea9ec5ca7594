"""``benchmarks.kit.compare``: the order of its runs, its table, its clean-up, which command runs
each commit's benchmark, and that each side really runs its own commit's code. Only shapes and
signs of measured values are checked, never speeds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.kit import compare
from benchmarks.kit.compare import BASE, HEAD, HIVEMIND

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(300)


def _worktree_paths() -> set[str]:
    listing = subprocess.run(
        ["git", "worktree", "list", "--porcelain"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {line.split(" ", 1)[1] for line in listing.splitlines() if line.startswith("worktree ")}


def test_runs_alternate_between_the_commits_repeat_by_repeat() -> None:
    order = compare.schedule(["dht", "allreduce"], [BASE, HEAD, HIVEMIND], 2)
    assert order == [
        ("dht", 0, BASE),
        ("dht", 0, HEAD),
        ("dht", 0, HIVEMIND),
        ("dht", 1, BASE),
        ("dht", 1, HEAD),
        ("dht", 1, HIVEMIND),
        ("allreduce", 0, BASE),
        ("allreduce", 0, HEAD),
        ("allreduce", 0, HIVEMIND),
        ("allreduce", 1, BASE),
        ("allreduce", 1, HEAD),
        ("allreduce", 1, HIVEMIND),
    ]


def _dht_result(node_start: float, latest: float) -> dict[str, Any]:
    return {
        "node_start_ms": {"mean_ms": node_start},
        "sequential": {"get_latest": {"mean_ms": latest}},
    }


def test_the_table_has_medians_and_ratios_per_metric() -> None:
    dht = next(b for b in compare.BENCHMARKS if b.name == "dht")
    runs = {
        BASE: [_dht_result(300, 40), _dht_result(280, 10), _dht_result(900, 20)],
        HEAD: [_dht_result(150, 10), _dht_result(140, 30)],
        HIVEMIND: [_dht_result(600, 50)],
    }
    rows = {row["metric"]: row for row in compare.summarize(dht, runs)}
    start = rows["node start"]
    assert (start[BASE], start[HEAD], start[HIVEMIND]) == (300, 145, 600)
    assert start["head_over_base"] == pytest.approx(145 / 300)
    # each repeat's own ratio: 150/300 and 140/280 (the third base run has no partner)
    assert start["head_over_base_paired"] == pytest.approx(0.5)
    assert start["head_over_hivemind_paired"] == pytest.approx(0.25)
    assert start["head_over_hivemind"] == pytest.approx(145 / 600)
    assert start["base_over_hivemind"] == pytest.approx(0.5)
    latest = rows["get latest=True (sequential)"]
    assert latest["head_over_base"] == pytest.approx(1.0)
    # a field missing from every run: no median, no ratio, never a zero
    store = rows["store (sequential)"]
    assert store[BASE] is None
    assert store["head_over_base"] is None
    text = compare.table({"dht": list(rows.values())}, {BASE: "BASE a1", HEAD: "HEAD b2"})
    header, first = text.splitlines()[:2]
    assert header.split() == [
        "benchmark",
        "metric",
        "unit",
        "BASE",
        "a1",
        "HEAD",
        "b2",
        "HEAD/BASE",
        "paired",
        "hivemind",
        "HEAD/hm",
        "paired",
        "BASE/hm",
    ]
    assert first.split()[-8:] == [
        "300.0",
        "145.0",
        "0.483",
        "0.500",
        "600.0",
        "0.242",
        "0.250",
        "0.500",
    ]


def test_a_failed_run_keeps_its_place_in_the_pairs() -> None:
    dht = next(b for b in compare.BENCHMARKS if b.name == "dht")
    runs: dict[str, list[dict[str, Any] | None]] = {
        BASE: [_dht_result(100, 1), None, _dht_result(300, 1)],
        HEAD: [_dht_result(50, 1), _dht_result(900, 1), _dht_result(600, 1)],
    }
    start = next(row for row in compare.summarize(dht, runs) if row["metric"] == "node start")
    assert start["base_runs"] == [100, None, 300]
    assert start[BASE] == 200
    assert start["head_over_base_paired"] == pytest.approx(1.25)  # 0.5 and 2.0, not 9.0


def test_a_ratio_needs_both_sides() -> None:
    assert compare.ratio(None, 2.0) is None
    assert compare.ratio(1.0, 0.0) is None
    assert compare.ratio(1.0, 4.0) == 0.25
    assert compare.median_or_none([None, None]) is None
    assert compare.median_or_none([3.0, None, 1.0]) == 2.0


def test_the_allreduce_cpu_is_the_median_rounds_sum() -> None:
    rounds = [
        {"cpu_s_per_peer": [0.1, 0.2]},
        {"cpu_s_per_peer": [0.5, 0.5]},
        {"cpu_s_per_peer": [0.2]},
    ]
    assert compare.allreduce_cpu({"rounds": rounds}) == pytest.approx(0.3)
    assert compare.allreduce_cpu({}) is None


def test_a_tree_runs_its_benchmark_as_a_module_or_as_its_flat_script(tmp_path: Path) -> None:
    dht = next(b for b in compare.BENCHMARKS if b.name == "dht")
    rooms, flat = tmp_path / "rooms", tmp_path / "flat"
    (rooms / "benchmarks" / "net").mkdir(parents=True)
    (rooms / "benchmarks" / "net" / "dht.py").touch()
    (flat / "benchmarks").mkdir(parents=True)
    (flat / "benchmarks" / "dht.py").touch()
    assert compare.benchmark_argv(dht, rooms) == ["-m", "benchmarks.net.dht"]
    assert compare.benchmark_argv(dht, flat) == [str(flat / "benchmarks" / "dht.py")]
    # this checkout has every benchmark the comparison runs
    for benchmark in compare.BENCHMARKS:
        assert compare.benchmark_argv(benchmark, ROOT)[0] == "-m", benchmark.name


def _fail_inside_worktrees(parent: Path, made: dict[str, Path]) -> None:
    with compare.worktrees({BASE: "HEAD", HEAD: "HEAD"}, parent=parent) as trees:
        made.update(trees)
        for tree in trees.values():
            assert (tree / "core" / "__init__.py").is_file()
            (tree / "core" / "__pycache__").mkdir(exist_ok=True)  # a build output, untracked
        assert {str(p) for p in trees.values()} <= _worktree_paths()
        raise RuntimeError("a failing benchmark")


def test_worktrees_are_removed_after_a_failure(tmp_path: Path) -> None:
    made: dict[str, Path] = {}
    with pytest.raises(RuntimeError, match="a failing benchmark"):
        _fail_inside_worktrees(tmp_path, made)
    assert set(made) == {BASE, HEAD}
    assert not any(path.exists() for path in made.values())
    assert list(tmp_path.iterdir()) == []
    # (only ours: other checkouts of the same repository may add or remove worktrees meanwhile)
    assert not {str(path) for path in made.values()} & _worktree_paths()


def test_each_side_imports_its_own_tree(tmp_path: Path) -> None:
    python = Path(sys.executable)
    with compare.worktrees({HEAD: "HEAD"}, parent=tmp_path) as trees:
        origins = compare.verify_trees(python, trees)
        assert Path(origins[HEAD]).is_relative_to(trees[HEAD])
    # a tree without core: the check must see that core came from somewhere else and stop
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit, match="core was imported from"):
        compare.verify_trees(python, {BASE: empty})


def test_head_against_itself_runs_and_writes_its_json(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.kit.compare",
            "HEAD",
            "HEAD",
            "--quick",
            "--only",
            "transport",
            "--repeats",
            "1",
            "--python",
            sys.executable,
            "--json",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=240,
        cwd=ROOT,
    )
    report = json.loads(out.read_text())
    assert report["commits"][BASE]["sha"] == report["commits"][HEAD]["sha"]
    assert [tuple(step) for step in report["order"]] == [
        ("transport", 0, BASE),
        ("transport", 0, HEAD),
    ]
    assert report["failed_runs"] == 0
    for arm in (BASE, HEAD):
        assert "barnraise-ab-" in report["core_file"][arm]
        assert len(report["runs"]["transport"][arm]) == 1
    for row in report["table"]["transport"]:
        assert row[BASE] > 0
        assert row[HEAD] > 0
        assert row["head_over_base"] > 0
