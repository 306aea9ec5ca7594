"""A/B comparison of two commits on the transport, DHT, all-reduce and demo swarm benchmarks, runs
alternated.

    python -m benchmarks.kit.compare 6518c0c HEAD --repeats 3 --json ab.json
    python -m benchmarks.kit.compare 6518c0c HEAD --only dht --hivemind      # with hivemind's figures
    python -m benchmarks.kit.compare HEAD HEAD --quick --only transport --repeats 1   # a smoke test
    python -m benchmarks.kit.compare 6518c0c HEAD --check     # only show which code each side runs

Each commit is checked out into its own temporary ``git worktree`` (removed at the end, after a
failure or Ctrl-C too). For every benchmark the runs alternate, BASE HEAD BASE HEAD ... (with
``--hivemind``: BASE HEAD hivemind ...), so that a burst of other work on a shared machine hits both
sides alike; the table gives each metric's median over the repeats and HEAD/BASE (below 1: HEAD
takes less, except for the rates marked "higher is better").

Every run uses this checkout's interpreter (``.venv``) but its commit's own code: the benchmark runs
as a module from the commit's tree (``python -m benchmarks.net.dht`` there; a commit whose
``benchmarks/`` holds flat scripts runs ``benchmarks/dht.py``), with ``PYTHONPATH`` naming that tree,
which puts it ahead of the editable install of this checkout that ``.venv`` carries (a path entry
beats the install's import hook). The benchmarks' worker processes (``python -m
benchmarks.<room>.<name> --worker``) and the ``barnraise`` console script that the DHT benchmark
starts inherit it. Before any run each tree is checked both ways, and the files ``core``
came from are printed: a run that would time this checkout's code instead fails the comparison.

The hivemind reference (``../shared/bench/hivemind_ref.py`` in ``.venv-hivemind``, see that folder's
README) has the same field names for the DHT and all-reduce rows, so those get HEAD/hivemind too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BASE, HEAD, HIVEMIND = "base", "head", "hivemind"
RUN_TIMEOUT = 1800.0
"""A hang guard for one benchmark run (the default all-reduce run takes about a minute)."""

Extract = Callable[[dict[str, Any]], float | None]


def field(*path: str) -> Extract:
    """Reads the number at ``path`` in a benchmark's JSON (None where it is missing)."""

    def read(result: dict[str, Any]) -> float | None:
        node: Any = result
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        return float(node) if isinstance(node, int | float) and not isinstance(node, bool) else None

    return read


def allreduce_cpu(result: dict[str, Any]) -> float | None:
    """CPU seconds all peers spent in one all-reduce, median over the rounds (the peers share the
    machine's cores, so this is what the wall time is made of)."""
    rounds = result.get("rounds")
    if not isinstance(rounds, list) or not rounds:
        return None
    totals = [
        sum(r["cpu_s_per_peer"]) for r in rounds if isinstance(r, dict) and r.get("cpu_s_per_peer")
    ]
    return statistics.median(totals) if totals else None


def demo_run(name: str) -> Extract:
    """Reads ``name`` of the demo swarm's first run (the benchmark runs one peer count here)."""

    def read(result: dict[str, Any]) -> float | None:
        runs = result.get("runs")
        first = runs[0] if isinstance(runs, list) and runs and isinstance(runs[0], dict) else {}
        value = first.get(name)
        return (
            float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        )

    return read


@dataclass(frozen=True)
class Metric:
    label: str
    unit: str
    extract: Extract
    higher_is_better: bool = False
    reference: bool = False
    """The hivemind reference reports it under the same name."""


@dataclass(frozen=True)
class Benchmark:
    name: str
    module: str
    """``benchmarks.<room>.<name>``: run with ``-m`` from the commit's tree."""
    flat: str
    """The same benchmark in a tree whose ``benchmarks/`` holds flat scripts (older commits)."""
    args: tuple[str, ...]
    quick_args: tuple[str, ...]
    metrics: tuple[Metric, ...]
    reference_args: tuple[str, ...] = ()
    """``hivemind_ref.py`` arguments for the same shape; empty: no reference exists."""
    quick_reference_args: tuple[str, ...] = ()
    own_reference_option: bool = False
    """The script runs the reference itself unless told ``--no-hivemind``."""


DHT_SHAPE = ("--nodes", "30", "--ops", "60")
DHT_QUICK = ("--nodes", "3", "--ops", "3", "--settle", "0.2")
AVG_SHAPE = ("--peers", "4", "--numel", "10000000", "--rounds", "3", "--compression", "none")
AVG_QUICK = ("--peers", "2", "--numel", "100000", "--rounds", "1", "--compression", "none")
DEMO_SHAPE = ("--peers", "2", "--seconds", "60")
DEMO_QUICK = ("--peers", "1", "--seconds", "10")

BENCHMARKS = (
    Benchmark(
        "transport",
        "benchmarks.net.transport",
        "transport.py",
        ("--mbytes", "400", "--calls", "5000", "--repeats", "5"),
        ("--mbytes", "4", "--calls", "100", "--repeats", "1"),
        (
            Metric("RPC round trip p50", "us", field("rpc_roundtrip_us", "p50")),
            Metric("RPC round trip mean", "us", field("rpc_roundtrip_us", "mean")),
            Metric("stream (higher is better)", "MB/s", field("stream_MBps"), True),
            Metric("raw TCP (higher is better)", "MB/s", field("raw_tcp_MBps"), True),
        ),
    ),
    Benchmark(
        "dht",
        "benchmarks.net.dht",
        "dht.py",
        DHT_SHAPE,
        DHT_QUICK,
        (
            Metric("node start", "ms", field("node_start_ms", "mean_ms"), reference=True),
            Metric(
                "store (sequential)", "ms", field("sequential", "store", "mean_ms"), reference=True
            ),
            Metric("get (sequential)", "ms", field("sequential", "get", "mean_ms"), reference=True),
            Metric(
                "get latest=True (sequential)",
                "ms",
                field("sequential", "get_latest", "mean_ms"),
                reference=True,
            ),
            Metric(
                "store x K (concurrent)",
                "s",
                field("concurrent", "store", "wall_s"),
                reference=True,
            ),
            Metric(
                "get x K (concurrent)", "s", field("concurrent", "get", "wall_s"), reference=True
            ),
        ),
        ("dht", *DHT_SHAPE),
        ("dht", *DHT_QUICK),
        own_reference_option=True,
    ),
    Benchmark(
        "allreduce",
        "benchmarks.net.allreduce",
        "allreduce.py",
        AVG_SHAPE,
        AVG_QUICK,
        (
            Metric("all-reduce (median round)", "s", field("allreduce_s_median"), reference=True),
            Metric("all-reduce CPU, all peers", "s", allreduce_cpu),
            Metric(
                "matchmaking (median round)", "s", field("matchmaking_s_median"), reference=True
            ),
            Metric("peers' start", "s", field("setup_s")),
        ),
        ("avg", *AVG_SHAPE),
        ("avg", *AVG_QUICK),
        own_reference_option=True,
    ),
    Benchmark(
        "demo",
        "benchmarks.swarm.demo",
        "swarm.py",
        DEMO_SHAPE,
        DEMO_QUICK,
        (
            Metric("demo swarm (higher is better)", "samples/s", demo_run("samples_per_s"), True),
            Metric("demo swarm / plain (higher is better)", "x", demo_run("ratio_to_plain"), True),
            Metric(
                "plain training (higher is better)",
                "samples/s",
                field("plain", "samples_per_s"),
                True,
            ),
            Metric("averaging per epoch (median)", "s", demo_run("averaging_s_per_epoch_median")),
        ),
    ),
)


# ---- pure parts: the order of runs, medians and ratios, the table ---------------------------------


def schedule(
    benchmarks: Sequence[str], arms: Sequence[str], repeats: int
) -> list[tuple[str, int, str]]:
    """(benchmark, repeat, arm) in running order: per benchmark, the arms alternate repeat by repeat."""
    return [(b, r, arm) for b in benchmarks for r in range(repeats) for arm in arms]


def median_or_none(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def paired(
    numerators: Sequence[float | None], denominators: Sequence[float | None]
) -> float | None:
    """The median of each repeat's own ratio: the two runs of a repeat ran back to back, so a burst
    of other work that spans several repeats moves this less than the ratio of the medians."""
    return median_or_none([ratio(n, d) for n, d in zip(numerators, denominators, strict=False)])


def summarize(
    benchmark: Benchmark, runs: dict[str, list[dict[str, Any] | None]]
) -> list[dict[str, Any]]:
    """One row per metric: each arm's median over its runs (a failed run is None), HEAD/BASE as the
    ratio of the medians and as the median of the repeats' ratios, and the same against hivemind."""
    rows = []
    for metric in benchmark.metrics:
        row: dict[str, Any] = {"metric": metric.label, "unit": metric.unit}
        for arm, results in runs.items():
            if arm == HIVEMIND and not metric.reference:
                continue
            values = [None if result is None else metric.extract(result) for result in results]
            row[arm] = median_or_none(values)
            row[f"{arm}_runs"] = values
        row["head_over_base"] = ratio(row.get(HEAD), row.get(BASE))
        row["head_over_base_paired"] = paired(
            row.get(f"{HEAD}_runs", []), row.get(f"{BASE}_runs", [])
        )
        if HIVEMIND in runs and metric.reference:
            row["head_over_hivemind"] = ratio(row.get(HEAD), row.get(HIVEMIND))
            row["head_over_hivemind_paired"] = paired(
                row.get(f"{HEAD}_runs", []), row.get(f"{HIVEMIND}_runs", [])
            )
            row["base_over_hivemind"] = ratio(row.get(BASE), row.get(HIVEMIND))
        row["higher_is_better"] = metric.higher_is_better
        rows.append(row)
    return rows


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def table(results: dict[str, list[dict[str, Any]]], labels: dict[str, str]) -> str:
    """The rows of every benchmark as aligned text, HEAD/BASE (and HEAD/hivemind) last."""
    with_reference = any("head_over_hivemind" in row for rows in results.values() for row in rows)
    header = ["benchmark", "metric", "unit", labels[BASE], labels[HEAD], "HEAD/BASE", "paired"]
    if with_reference:
        header += ["hivemind", "HEAD/hm", "paired", "BASE/hm"]
    lines = [header]
    for name, rows in results.items():
        for row in rows:
            line = [
                name,
                row["metric"],
                row["unit"],
                _number(row.get(BASE)),
                _number(row.get(HEAD)),
            ]
            line += [_number(row["head_over_base"]), _number(row["head_over_base_paired"])]
            if with_reference:
                line += [
                    _number(row.get(HIVEMIND)),
                    _number(row.get("head_over_hivemind")),
                    _number(row.get("head_over_hivemind_paired")),
                    _number(row.get("base_over_hivemind")),
                ]
            lines.append(line)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = []
    for line in lines:
        cells = [
            cell.ljust(width) if i < 3 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ]
        text.append("  ".join(cells).rstrip())
    return "\n".join(text)


# ---- the commits' trees --------------------------------------------------------------------------


def git(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def remove_worktree(path: Path) -> None:
    """Removes a worktree made by ``worktrees`` whatever state it is in (build outputs included)."""
    subprocess.run(
        ["git", "worktree", "remove", "--force", str(path)],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True, check=False)


@contextmanager
def worktrees(commits: dict[str, str], parent: Path | None = None) -> Iterator[dict[str, Path]]:
    """Each commit checked out (detached) into its own directory, all removed when the block ends."""
    where = Path(tempfile.mkdtemp(prefix="barnraise-ab-", dir=parent))
    made: list[Path] = []
    try:
        trees = {}
        for arm, commit in commits.items():
            path = where / arm
            made.append(path)
            git("worktree", "add", "--detach", "--quiet", str(path), commit)
            trees[arm] = path
        yield trees
    finally:
        for path in made:
            remove_worktree(path)
        shutil.rmtree(where, ignore_errors=True)


def default_python() -> Path:
    venv = ROOT / ".venv"
    candidate = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    return candidate if candidate.exists() else Path(sys.executable)


def environment(tree: Path) -> dict[str, str]:
    """This process's environment, with the tree's code ahead of anything installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    return env


def _under(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def run_beside(tree: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` with the tree's environment, from the folder that holds the tree (not inside it)."""
    return subprocess.run(
        argv,
        cwd=tree.parent,
        env=environment(tree),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )


def core_origin(python: Path, tree: Path) -> Path:
    """Where ``core`` comes from in a plain interpreter given the tree's environment, from a neutral
    directory (so that the current directory cannot be what finds it)."""
    done = run_beside(tree, [str(python), "-c", "import core, core.cli.main; print(core.__file__)"])
    return Path(done.stdout.strip().splitlines()[-1])


def console_script_files(python: Path, tree: Path) -> list[Path] | None:
    """The files of ``core`` that the ``barnraise`` console script beside ``python`` loads for
    ``dht --help`` (``-v`` names each; the DHT benchmark starts its nodes that way), or None when there is
    no such script."""
    script = python.parent / ("barnraise.exe" if os.name == "nt" else "barnraise")
    if not script.exists() or os.name == "nt":
        return None
    done = run_beside(tree, [str(python), "-v", str(script), "dht", "--help"])
    loaded = re.findall(r"^# code object from '?(.+?)'?$", done.stderr, flags=re.MULTILINE)
    return [Path(p) for p in loaded if "core" in Path(p).parts]


def verify_trees(python: Path, trees: dict[str, Path]) -> dict[str, str]:
    """Check that each tree's runs import that tree's ``core``; returns ``core.__file__`` by arm."""
    origins = {}
    for arm, tree in trees.items():
        origin = core_origin(python, tree)
        if not _under(origin, tree):
            raise SystemExit(f"{arm}: core was imported from {origin}, not from {tree}")
        files = console_script_files(python, tree)
        if files is not None:
            strays = [f for f in files if not _under(f, tree)]
            if strays or not files:
                raise SystemExit(
                    f"{arm}: the barnraise console script loaded {strays or 'no core file'} "
                    f"instead of {tree}'s core"
                )
        origins[arm] = str(origin)
        script = "" if files is None else f", console script: {len(files)} core files from it"
        print(f"{arm}: core.__file__ = {origin}{script}", flush=True)
    return origins


# ---- running -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arms:
    python: Path
    trees: dict[str, Path]
    hivemind_python: Path | None
    hivemind_ref: Path | None


def benchmark_argv(benchmark: Benchmark, tree: Path) -> list[str]:
    """What follows the interpreter to run ``benchmark`` from ``tree``: its module, or its flat
    script where the tree has no such module."""
    if tree.joinpath(*benchmark.module.split(".")).with_suffix(".py").is_file():
        return ["-m", benchmark.module]
    return [str(tree / "benchmarks" / benchmark.flat)]


def command_for(
    benchmark: Benchmark, arm: str, arms: Arms, quick: bool, out: Path
) -> tuple[list[str], Path, dict[str, str]]:
    """The command line, directory and environment of one run."""
    if arm == HIVEMIND:
        assert arms.hivemind_python is not None
        assert arms.hivemind_ref is not None
        argv = benchmark.quick_reference_args if quick else benchmark.reference_args
        command = [str(arms.hivemind_python), str(arms.hivemind_ref), "--json", str(out), *argv]
        return command, arms.hivemind_ref.parent, dict(os.environ)
    tree = arms.trees[arm]
    args = list(benchmark.quick_args if quick else benchmark.args)
    if benchmark.own_reference_option:
        args.append("--no-hivemind")  # the reference is an arm of its own here
    command = [str(arms.python), *benchmark_argv(benchmark, tree), *args]
    return [*command, "--json", str(out)], tree, environment(tree)


def run_once(
    benchmark: Benchmark, arm: str, arms: Arms, *, quick: bool, scratch: Path, verbose: bool
) -> dict[str, Any] | None:
    out = scratch / f"{benchmark.name}-{arm}-{time.monotonic_ns()}.json"
    command, cwd, env = command_for(benchmark, arm, arms, quick, out)
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            env=env,
            stdout=None if verbose else subprocess.PIPE,
            stderr=None if verbose else subprocess.STDOUT,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
        took = time.perf_counter() - started
        if done.returncode != 0 or not out.exists():
            tail = "" if verbose else "\n".join((done.stdout or "").splitlines()[-15:])
            print(f"  {benchmark.name} {arm}: FAILED (exit {done.returncode})\n{tail}", flush=True)
            return None
        print(f"  {benchmark.name} {arm}: {took:.1f} s", flush=True)
        return dict(json.loads(out.read_text()))
    except subprocess.TimeoutExpired:
        print(f"  {benchmark.name} {arm}: no result within {RUN_TIMEOUT:g} s", flush=True)
        return None
    finally:
        out.unlink(missing_ok=True)


def compare(
    benchmarks: Sequence[Benchmark], arms: Arms, repeats: int, quick: bool, verbose: bool
) -> tuple[dict[str, dict[str, list[dict[str, Any] | None]]], int]:
    """Every run in ``schedule`` order; the results by benchmark and arm, and how many failed."""
    names = [arm for arm in (BASE, HEAD) if arm in arms.trees]
    failures = 0
    runs: dict[str, dict[str, list[dict[str, Any] | None]]] = {}
    by_name = {b.name: b for b in benchmarks}
    with tempfile.TemporaryDirectory(prefix="barnraise-ab-out-") as scratch:
        for bench_name, repeat, arm in schedule(
            [b.name for b in benchmarks], [*names, HIVEMIND], repeats
        ):
            benchmark = by_name[bench_name]
            if arm == HIVEMIND and (arms.hivemind_python is None or not benchmark.reference_args):
                continue
            if arm == names[0]:
                print(f"{bench_name}: repeat {repeat + 1} of {repeats}", flush=True)
            result = run_once(
                benchmark, arm, arms, quick=quick, scratch=Path(scratch), verbose=verbose
            )
            failures += result is None
            # a failed run stays as None, so that every repeat's runs keep their places (pairs)
            runs.setdefault(bench_name, {}).setdefault(arm, []).append(result)
    return runs, failures


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("base", help="the commit to compare against (any git revision)")
    parser.add_argument("head", help="the commit being judged (any git revision)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each commit (default 3)")
    parser.add_argument(
        "--only",
        default=",".join(b.name for b in BENCHMARKS),
        help="benchmarks to run, comma-separated (default: transport,dht,allreduce)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny shapes: a smoke test")
    parser.add_argument(
        "--hivemind", action="store_true", help="also run hivemind's reference, alternated too"
    )
    parser.add_argument("--hivemind-python", type=Path, default=ROOT / ".venv-hivemind/bin/python")
    parser.add_argument(
        "--hivemind-ref", type=Path, default=ROOT.parent / "shared/bench/hivemind_ref.py"
    )
    parser.add_argument("--python", type=Path, default=None, help="default: this checkout's .venv")
    parser.add_argument("--json", type=Path, help="write the runs and the table here")
    parser.add_argument("--check", action="store_true", help="only check which code each side runs")
    parser.add_argument("--verbose", action="store_true", help="show the benchmarks' own output")
    args = parser.parse_args(argv)
    known = {b.name: b for b in BENCHMARKS}
    wanted = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in known]
    if unknown or not wanted:
        parser.error(f"--only takes some of {', '.join(known)}; got {args.only!r}")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    hivemind_python = hivemind_ref = None
    if args.hivemind:
        if not args.hivemind_python.exists() or not args.hivemind_ref.exists():
            parser.error(
                f"--hivemind needs {args.hivemind_python} and {args.hivemind_ref} "
                "(see ../shared/bench/README.md)"
            )
        hivemind_python, hivemind_ref = args.hivemind_python, args.hivemind_ref.resolve()
    python = args.python or default_python()
    commits = {BASE: git("rev-parse", "--verify", f"{args.base}^{{commit}}")}
    commits[HEAD] = git("rev-parse", "--verify", f"{args.head}^{{commit}}")
    labels = {BASE: f"BASE {args.base}", HEAD: f"HEAD {args.head}"}
    chosen = [known[name] for name in wanted]
    signal.signal(signal.SIGTERM, _raise_interrupt)
    started = datetime.now(UTC)
    try:
        with worktrees(commits) as trees:
            origins = verify_trees(python, trees)
            if args.check:
                return 0
            arms = Arms(python, trees, hivemind_python, hivemind_ref)
            runs, failures = compare(chosen, arms, args.repeats, args.quick, args.verbose)
    except KeyboardInterrupt:
        print("interrupted: the worktrees were removed", file=sys.stderr)
        return 130
    results = {b.name: summarize(b, runs.get(b.name, {})) for b in chosen}
    print()
    print(table(results, labels))
    report = {
        "date": started.isoformat(timespec="seconds"),
        "commits": {arm: {"ref": getattr(args, arm), "sha": sha} for arm, sha in commits.items()},
        "core_file": origins,
        "python": str(python),
        "repeats": args.repeats,
        "quick": args.quick,
        "order": schedule(
            wanted, [BASE, HEAD, *([HIVEMIND] if args.hivemind else [])], args.repeats
        ),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "failed_runs": failures,
        "table": results,
        "runs": runs,
    }
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if failures:
        print(f"{failures} run(s) failed; their medians leave them out", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
