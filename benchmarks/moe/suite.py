"""Decentralized mixture-of-experts benchmarks: one run, one JSON, a section per part.

    python -m benchmarks.moe.suite [--parts server,beam,convergence,throughput] [--quick]
                                   [--no-hivemind] [--json out.json]

Parts (``PARTS``; each is a module of its own in ``benchmarks/moe/``, see its docstring for the
method):

- ``server`` (``server.py``): expert server throughput, forward+backward, 16 ffn experts and 8
  trainer processes on loopback, ours next to hivemind 1.1.12's ``hivemind.moe.Server``.
- ``beam`` (``beam.py``, ``beam_swarm.py``): beam-search latency on an in-memory DHT of 100, 1,000
  and 10,000 nodes with simulated wide-area latency, next to Learning@home's figures.
- ``convergence`` (``convergence.py``, ``convergence_runs.py``): Section 4.2 at small scale, a
  feed-forward baseline against DMoE models trained asynchronously on the digits under low and high
  latency and 10 % failures; curves to the JSON and a PNG plot.
- ``throughput`` (``throughput.py``): Section 4.1, samples/s of many ffn blocks as remote
  experts under latency, Learning@home's asynchronous trainers against model-parallel execution;
  a PNG plot.

``loopback_experts.py`` starts the expert servers both experiments use; ``benchmarks/kit/``'s
``plot_png.py`` draws their plots with Qt (no other plotting library) and its ``measuring.py`` holds
the shared percentiles and CPU accounting.

``--quick`` gives every part small sizes (seconds, for the test of this script); options given on the
command line still win. ``--no-hivemind`` skips the reference runs, which are also skipped, and said
to be ("not run"), when ``--hivemind-python`` does not exist. The summary goes to stdout; the JSON to
``--json`` (or stdout without it). A part that fails is recorded as such and the others still run;
the exit status is then 1.

Adding a part is one line in ``PARTS`` plus its module, which provides: ``NAME`` and ``HELP``;
``DEFAULTS`` and ``QUICK`` (option dest -> full-size and ``--quick`` value); ``add_options(parser)``
adding its options, named ``--<part>-...`` with no argparse default; ``run(args) -> dict`` (its JSON
section; synchronous, it may ``asyncio.run`` inside); ``summarize(section) -> list[str]``. Modules
import torch and ``core`` inside their functions, so that listing the options stays fast. Only the
chosen parts are imported (all of them for ``--help``); one that cannot be imported is recorded as
failed and the others still run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.kit.harness import ROOT

PARTS: dict[str, str] = {
    "server": "benchmarks.moe.server",
    "beam": "benchmarks.moe.beam",
    "convergence": "benchmarks.moe.convergence",
    "throughput": "benchmarks.moe.throughput",
}
"""Part name -> its module (run in the order given by ``--parts``)."""


def load_parts(names: list[str]) -> tuple[dict[str, ModuleType], dict[str, str]]:
    """The parts' modules, and why each one that cannot be imported cannot (a part still being
    written must not stop the others from running)."""
    loaded, broken = {}, {}
    for name in names:
        try:
            loaded[name] = importlib.import_module(PARTS[name])
        except Exception as exc:
            broken[name] = f"error: cannot import {PARTS[name]}: {type(exc).__name__}: {exc}"
    return loaded, broken


def resolve(args: argparse.Namespace, part: ModuleType) -> None:
    """Options not given on the command line take the part's quick or full-size value."""
    for dest, value in part.DEFAULTS.items():
        if getattr(args, dest, None) is None:
            quick = getattr(part, "QUICK", {})
            setattr(args, dest, quick[dest] if args.quick and dest in quick else value)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def run_part(name: str, part: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    print(f"part {name}: {part.HELP}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    section: dict[str, Any] = {"load_before": load()}
    try:
        section.update(part.run(args))
        section["status"] = "ok"
    except Exception as exc:  # recorded; the other parts still run
        traceback.print_exc()
        section["status"] = f"error: {type(exc).__name__}: {exc}"
    section["load_after"] = load()
    section["wall_s"] = round(time.perf_counter() - started, 1)
    return section


def main() -> int:
    # which parts first: only those are imported (all of them for --help)
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--parts", default=",".join(PARTS))
    chosen = [p.strip() for p in early.parse_known_args()[0].parts.split(",") if p.strip()]
    wants_help = any(a in ("-h", "--help") for a in sys.argv[1:])
    parts, broken = load_parts(list(PARTS) if wants_help else [p for p in chosen if p in PARTS])

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"comma-separated, from: {', '.join(PARTS)} (default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: seconds, for tests")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--no-hivemind", action="store_true", help="skip the reference runs")
    parser.add_argument(
        "--hivemind-python", default=str(ROOT / ".venv-hivemind" / "bin" / "python")
    )
    for part in parts.values():
        part.add_options(parser)
    args = parser.parse_args()
    unknown = [p for p in chosen if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; known: {', '.join(PARTS)}")

    result: dict[str, Any] = {
        "benchmark": "moe",
        "parts": chosen,
        "quick": args.quick,
        "argv": sys.argv[1:],
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "env": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
    }
    started = time.perf_counter()
    for name in chosen:
        if name in broken:
            print(f"part {name}: {broken[name]}", file=sys.stderr, flush=True)
            result[name] = {"status": broken[name], "wall_s": 0.0, "load_before": load()}
            continue
        resolve(args, parts[name])
        result[name] = run_part(name, parts[name], args)
    result["wall_s"] = round(time.perf_counter() - started, 1)

    text = json.dumps(result, indent=2)
    if args.json is not None:
        args.json.write_text(text + "\n")
    print(f"moe benchmarks ({'quick' if args.quick else 'full'}), {result['wall_s']} s")
    for name in chosen:
        section = result[name]
        print(f"[{name}] {section['status']}, {section['wall_s']} s, load {section['load_before']}")
        if section["status"] == "ok":
            for line in parts[name].summarize(section):
                print(f"  {line}")
    if args.json is None:
        print(text)
    return 0 if all(result[name]["status"] == "ok" for name in chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
