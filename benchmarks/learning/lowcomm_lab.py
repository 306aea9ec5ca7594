"""Low-communication training across home links: dedloc and diloco side by side in the NAT lab.

    sudo python -m benchmarks.learning.lowcomm_lab --json out.json [--minutes 4] [--preset albert-large]

It builds a NAT lab (``tests/lab/natlab.py``: a public host and three homes behind cone NATs, in
network namespaces; root, iproute2 and nftables) with every home link shaped like a home connection
(``--down-mbit`` 20 / ``--up-mbit`` 10, tbf on the home router: its WAN side's egress is the
upload, its LAN side's the download). A backbone (``barnraise backbone``, default arguments) runs on the
public host and one volunteer (``barnraise peer --initial-peers BACKBONE``, default arguments but
``--threads 1`` and its work folder) in each home, once per mode, each mode in a fresh lab:

- ``dedloc``: the preset's codec (``auto``), and its state averaging every 5 epochs;
- ``diloco``: rounds of ``--round-seconds``, pseudo-gradients sent top-k sparse
  (``codec = "topk"``, ``density = 0.01``, ``bits = 2``), plain outer steps (``outer_lr = 1.0``,
  ``outer_momentum = 0``: what the manifest asks for with ``topk``).

Both train the preset's model (``albert-large``: 17M parameters) on the demo's shards and tokenizer
(4096 tokens: the model's other embedding rows are never used) for ``--minutes`` from the moment
all three volunteers are ready; then every volunteer is stopped with SIGTERM. Recorded per mode:

- each volunteer's **compute fraction**: the seconds its Trainer spent inside microbatches (forward
  and backward, with the batch's loading; the optimizer's step and any wait for the collaboration
  are not in it) over its wall seconds from ``ready`` until it stopped training, both from its
  ``stopped`` event; with its samples, epochs (landed rounds in diloco), and bytes sent and
  received (its Host's count, and its home's link counters);
- the **loss** the backbone's metrics give for the last epoch reported before the stop. This is a
  *training* loss (the volunteers' microbatch losses in that epoch, before its update): no held-out
  evaluation exists for these models yet.

Goals: every diloco volunteer computes at least 95 % of its time
(``diloco_compute_fraction_at_least_0_95``), and diloco's last loss is below dedloc's after the
same wall time (``diloco_loss_below_dedloc``).

One microbatch of the preset's size (16 samples of 512 tokens) takes about ten minutes on one CPU
thread, and its target batch (4096 samples) hours of the three volunteers: on a CPU machine the
albert-large run is scaled unless ``--microbatch 0 --seq-len 0 --target-batch 0`` ask for the
preset's own sizes. The defaults, 2 samples of 64 tokens and a target batch of 24, keep a
microbatch (5-10 s here) under the preset's matchmaking time (15 s): a volunteer sees a round's end
or an epoch's readiness only between microbatches, so longer ones make members miss each other's
groups (2 samples of 128 tokens, 13-17 s, did so in both modes; on a busy machine it still
happens); a 60 s round then holds several microbatches, and a dedloc epoch about as many. The
preset's learning-rate warm-up (5000 steps) is kept unless ``--warmup-steps`` says otherwise: in a
few minutes both modes are still at its start, where the loss barely moves. Every namespace and
process is removed at the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.kit.harness import emit, precompile

MODES = ("dedloc", "diloco")
HOMES = ("h1", "h2", "h3")
CPU_SIZES = {"albert-large": {"microbatch_size": 2, "seq_len": 64, "target_batch_size": 24}}
"""Sizes a 2-core CPU gets through in minutes (see the module's notes); other presets keep theirs."""
DILOCO_OUTER = "outer_lr = 1.0\nouter_momentum = 0.0"
"""With topk the error-feedback residual carries the momentum (docs/organizers/modes.md)."""
GOAL_FRACTION = 0.95
READY_TIMEOUT = 300.0
STOP_TIMEOUT = 180.0
"""A dedloc volunteer may be in an exchange on a shaped link when told to stop."""


# ---- the projects --------------------------------------------------------------------------------


def sizes(args: argparse.Namespace) -> dict[str, int | None]:
    """The sizes to write into the manifests; None keeps the preset's."""
    scaled = CPU_SIZES.get(args.preset, {})
    chosen = {
        "microbatch_size": args.microbatch,
        "seq_len": args.seq_len,
        "target_batch_size": args.target_batch,
        "warmup_steps": args.warmup_steps,
    }
    # None: this machine's size for the preset, if any; 0: the preset's own
    return {
        key: (scaled.get(key) if value is None else value) or None for key, value in chosen.items()
    }


def set_key(text: str, key: str, value: str) -> str:
    text, count = re.subn(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.MULTILINE)
    if count != 1:
        raise SystemExit(f"the preset's manifest has {count} lines for {key}, not one")
    return text


def write_project(args: argparse.Namespace, mode: str, data: Path, root: Path) -> Path:
    """The preset's manifest in ``mode`` with the chosen sizes, the demo's data beside it."""
    from core.project import load_manifest
    from core.util.process.resources import resource_path

    root.mkdir(parents=True)
    for name in ("shards", "tokenizer.json"):
        (root / name).symlink_to(data / name)
    text = resource_path(f"{args.preset}/project.toml").read_text()
    for key, value in sizes(args).items():
        if value is not None:
            text = set_key(text, key, str(value))
    training = f'mode = "{mode}"'
    if mode == "diloco":
        training += f"\nround_seconds = {args.round_seconds:g}\n{DILOCO_OUTER}"
        text = set_key(text, "codec", '"topk"\ndensity = 0.01\nbits = 2')
    text, count = re.subn(r"^\[training\]\n", f"[training]\n{training}\n", text, flags=re.M)
    if count != 1:
        raise SystemExit("the preset's manifest has no [training] section")
    path = root / "project.toml"
    path.write_text(text)
    load_manifest(path)  # a refused combination fails here, naming its key
    return path


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What the runs train: the preset's values and the ones this run used instead."""
    import torch

    from core.project import load_manifest
    from core.training.peer.recipe import build_model
    from core.util.process.resources import resource_path

    manifest = load_manifest(resource_path(f"{args.preset}/project.toml"))
    t = manifest.training
    with torch.device("meta"):
        parameters = build_model(manifest).num_parameters()
    preset = {
        "microbatch_size": t.microbatch_size,
        "seq_len": manifest.data.seq_len,
        "target_batch_size": t.target_batch_size,
        "warmup_steps": t.warmup_steps,
    }
    used = {key: value or preset[key] for key, value in sizes(args).items()}
    return {
        "preset": args.preset,
        "parameters": parameters,
        "preset_values": preset,
        "used": {**used, "round_seconds": args.round_seconds},
        "scaled": sorted(key for key in used if used[key] != preset[key]),
        "diloco_codec": {"codec": "topk", "density": 0.01, "bits": 2},
        "diloco_outer": {"outer_lr": 1.0, "outer_momentum": 0.0},
        "dedloc_codec": manifest.averaging.codec,
        "data": "the demo's shards and tokenizer (4096 tokens)",
    }


# ---- one run in the lab --------------------------------------------------------------------------


def link_bytes(lab: Any, where: str) -> dict[str, int]:
    """Bytes the home's own interface sent and received, IP headers included."""
    done = lab.run(where, ["ip", "-j", "-s", "link", "show", "dev", "eth0"], check=True)
    stats = json.loads(done.stdout)[0]["stats64"]
    return {"link_tx_bytes": stats["tx"]["bytes"], "link_rx_bytes": stats["rx"]["bytes"]}


def of_kind(proc: Any, kind: str) -> list[dict[str, Any]]:
    return [e for e in proc.events if e.get("event") == kind]


def volunteer(proc: Any, stopped: dict[str, Any] | None, link: dict[str, int]) -> dict[str, Any]:
    """One volunteer's figures from its events."""
    epochs = of_kind(proc, "epoch")
    out: dict[str, Any] = {
        "epochs": len(epochs),
        "epochs_averaged": sum(bool(e["averaged"]) for e in epochs),
        "last_epoch": epochs[-1]["epoch"] if epochs else None,
        "exchange_seconds": round(sum(e["seconds"] for e in epochs), 1),
        "chunk_bytes_sent": sum(e.get("bytes_sent", 0) for e in epochs),
        "waits_for_state": sum(e["reason"] is not None for e in of_kind(proc, "waiting")),
        **link,
    }
    if stopped is None:
        return {**out, "compute_fraction": None, "error": "no stopped event"}
    seconds, compute = stopped.get("seconds", 0.0), stopped.get("compute_seconds", 0.0)
    return {
        "compute_fraction": round(compute / seconds, 4) if seconds > 0 else None,
        "compute_seconds": compute,
        "seconds": seconds,
        "samples": stopped.get("samples", 0),
        "bytes_sent": stopped.get("bytes_sent", 0),
        "bytes_received": stopped.get("bytes_received", 0),
        **out,
    }


def wait_stopped(proc: Any) -> dict[str, Any] | None:
    try:
        return proc.wait_for(lambda e: e.get("event") == "stopped", STOP_TIMEOUT)
    except AssertionError as exc:  # it ended or hung without saying: its log's tail says why
        print(f"  {proc.where}: {str(exc)[-2000:]}", file=sys.stderr, flush=True)
        return None


def run_mode(args: argparse.Namespace, mode: str, data: Path, work: Path) -> dict[str, Any]:
    from tests.lab.natlab import NatLab
    from tests.lab.procs import LabProcess, peer_args

    project = write_project(args, mode, data, work / "project")
    with NatLab("cone", "cone", nat3="cone") as lab:
        for router in ("r1", "r2", "r3"):
            lab.shape(router, "wan", round(args.up_mbit * 1000))  # the home's upload
            lab.shape(router, "lan", round(args.down_mbit * 1000))  # its download
        argv = ["backbone", "--manifest", str(project), "--work-dir", str(work / "backbone")]
        aux = LabProcess(lab, "pub", argv, work / "backbone.log")
        backbone = aux.wait_for(lambda e: e.get("event") == "ready", READY_TIMEOUT)["address"]
        homes = {}
        for home in HOMES:
            argv = ["peer", *peer_args(project, work / home, "--initial-peers", backbone)]
            homes[home] = LabProcess(lab, home, argv, work / f"{home}.log")
        for proc in homes.values():
            proc.wait_for(lambda e: e.get("event") == "ready", READY_TIMEOUT)
        started, started_unix = time.monotonic(), time.time()
        print(f"  {mode}: three volunteers ready, training {args.minutes:g} min",
              file=sys.stderr, flush=True)  # fmt: skip
        time.sleep(args.minutes * 60)
        window = time.monotonic() - started
        stop_unix = time.time()
        for proc in homes.values():
            proc.proc.send_signal(signal.SIGTERM)
        stopped = {home: wait_stopped(proc) for home, proc in homes.items()}
        links = {home: link_bytes(lab, home) for home in HOMES}
        aux.proc.send_signal(signal.SIGTERM)
        aux_stopped = wait_stopped(aux)
    peers = {home: volunteer(homes[home], stopped[home], links[home]) for home in HOMES}
    fractions = [p["compute_fraction"] for p in peers.values() if p["compute_fraction"] is not None]
    # the collaboration's curve as the backbone saw it, up to the stop
    metrics = [m for m in of_kind(aux, "metrics") if m["time"] <= stop_unix]
    curve = [
        {"epoch": m["epoch"], "loss": m["loss"], "s": round(m["time"] - started_unix, 1)}
        for m in metrics
    ]
    losses = [m for m in metrics if m["loss"] is not None]
    last = losses[-1] if losses else None
    result = {
        "window_s": round(window, 1),
        "volunteers": peers,
        "compute_fraction_min": min(fractions) if len(fractions) == len(HOMES) else None,
        "compute_fraction_mean": round(sum(fractions) / len(fractions), 4) if fractions else None,
        "samples": sum(p.get("samples", 0) for p in peers.values()),
        "epochs_reported": len(metrics),
        "last_epoch": metrics[-1]["epoch"] if metrics else None,
        "final_loss": None if last is None else round(last["loss"], 4),
        "final_loss_epoch": None if last is None else last["epoch"],
        "loss_curve": curve,
        "backbone": {
            "bytes_sent": (aux_stopped or {}).get("bytes_sent"),
            "bytes_received": (aux_stopped or {}).get("bytes_received"),
        },
    }
    print(f"  {mode}: compute fraction {result['compute_fraction_mean']}, final loss "
          f"{result['final_loss']} (epoch {result['final_loss_epoch']})",
          file=sys.stderr, flush=True)  # fmt: skip
    return result


def bench(args: argparse.Namespace, data: Path, work: Path) -> dict[str, Any]:
    result: dict[str, Any] = {
        "benchmark": "lowcomm_lab",
        "lab": "public host + three homes behind cone NATs (tests/lab/natlab.py), one volunteer "
        "per home, a backbone on the public host",
        "links": {
            "down_mbit": args.down_mbit,
            "up_mbit": args.up_mbit,
            "shaping": "tbf on each home router: WAN egress (upload), LAN egress (download)",
        },
        "minutes": args.minutes,
        "settings": settings(args),
        "loss_kind": "training loss: the backbone's metrics of the last epoch reported before the "
        "stop (the volunteers' microbatch losses); no held-out evaluation exists yet",
        "compute_fraction_kind": "Trainer.compute_seconds (forward and backward of each "
        "microbatch) over wall seconds from ready to the end of training, per volunteer",
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "modes": {},
    }
    for mode in args.modes:
        result["modes"][mode] = run_mode(args, mode, data, work / mode)
    modes = result["modes"]
    result["compute_fraction"] = {m: modes[m]["compute_fraction_mean"] for m in modes}
    result["final_loss"] = {m: modes[m]["final_loss"] for m in modes}
    diloco, dedloc = modes.get("diloco", {}), modes.get("dedloc", {})
    fraction = diloco.get("compute_fraction_min")
    ours, theirs = diloco.get("final_loss"), dedloc.get("final_loss")
    result["goals"] = {
        "diloco_compute_fraction_at_least_0_95": fraction is not None and fraction >= GOAL_FRACTION,
        # not judged (None) when either mode reported no loss before the stop
        "diloco_loss_below_dedloc": None if ours is None or theirs is None else ours < theirs,
    }
    result["env"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    parser.add_argument("--minutes", type=float, default=4.0, help="training time per mode")
    parser.add_argument("--preset", default="albert-large", help="resources/PRESET/project.toml")
    parser.add_argument("--modes", default=",".join(MODES), help="which, in this order")
    parser.add_argument("--down-mbit", type=float, default=20.0)
    parser.add_argument("--up-mbit", type=float, default=10.0)
    parser.add_argument("--round-seconds", type=float, default=60.0, help="diloco's rounds")
    for flag, what in (
        ("--microbatch", "samples per microbatch"),
        ("--seq-len", "tokens per sample"),
        ("--target-batch", "dedloc's samples per epoch"),
        ("--warmup-steps", "the learning rate's warm-up"),
    ):
        parser.add_argument(
            flag,
            type=int,
            default=None,
            help=f"{what} (0: the preset's; default: its own, "
            "or for albert-large what a 2-core CPU gets through, see the script's notes)",
        )
    parser.add_argument("--data", type=Path, default=None, help="the demo's data (made if absent)")
    parser.add_argument("--work", type=Path, default=None, help="keep manifests and logs here")
    args = parser.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    if not set(args.modes) <= set(MODES):
        parser.error(f"--modes takes {' and '.join(MODES)}")
    from tests.lab.natlab import lab_unavailable, sweep_stale

    reason = lab_unavailable()
    if reason is not None:
        sys.exit(f"lowcomm_lab.py needs the NAT lab, which cannot be built here: {reason}")
    sweep_stale()
    precompile()
    with tempfile.TemporaryDirectory(prefix="lowcomm-lab-") as tmp:
        work = args.work or Path(tmp)
        data = args.data
        if data is None:
            from core.project import load_manifest
            from core.swarm.demo_data import DEMO_MANIFEST, prepare_demo_data

            data = work / "data"
            prepare_demo_data(load_manifest(DEMO_MANIFEST), data)
        result = bench(args, data.resolve(), work)
    emit(result, args.json)


if __name__ == "__main__":
    main()
