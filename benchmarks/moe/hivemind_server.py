"""Hivemind's side of the ``server`` part of ``benchmarks/moe/suite.py``: its server and its trainers.

Runs with hivemind's interpreter (``.venv-hivemind/bin/python``, hivemind 1.1.12, torch CPU), never
with ours; ``benchmarks/moe/server.py`` starts and times it exactly as it does our own workers, over
the same JSON lines on stdin and stdout:

- ``serve``: ``hivemind.moe.Server.create(expert_cls="ffn", hidden_dim=H, optim_cls=Adam, ...)``
  with the experts ``expert.0`` ... on 127.0.0.1; prints its multiaddrs and PeerID once ready,
  answers ``{"op": "stats"}``, shuts down when stdin closes.
- ``client``: a trainer with its own ``P2P`` (and so its own p2pd) connected to the server,
  ``RemoteExpert(ExpertInfo(uid, peer_id), p2p)`` per expert (how hivemind's own
  ``benchmark_throughput.py`` reaches a known server: no DHT lookup inside the timed loop); each step
  is ``out = expert(x)`` then ``out.sum().backward()``. Prints ``{"ready": true}`` after the warm-up
  calls, then answers ``{"op": "run", "duration": D}`` with every call's latency.

Uses only hivemind's public, pip-installed API. Whatever this process started (p2pd daemons,
connection-handler processes) is shut down by hivemind on exit; anything left is ended by PID.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import time
from typing import Any


def say(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


def commands() -> Any:
    for line in sys.stdin:
        if line.strip():
            yield json.loads(line)


def serve(args: argparse.Namespace) -> None:
    import hivemind
    import torch
    from hivemind.moe import Server

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    server = Server.create(
        expert_uids=[f"expert.{i}" for i in range(args.experts)],
        expert_cls="ffn",
        hidden_dim=args.hidden,
        optim_cls=torch.optim.Adam,  # lr 1e-3 by default, as ours
        num_handlers=args.handlers,
        max_batch_size=args.max_batch,
        device="cpu",
        host_maddrs=["/ip4/127.0.0.1/tcp/0"],
        start=True,
    )
    try:
        say(
            {
                "address": [str(a) for a in server.dht.get_visible_maddrs()],
                "peer_id": server.dht.peer_id.to_base58(),
                "pid": os.getpid(),
                "versions": {"hivemind": hivemind.__version__, "torch": torch.__version__},
                "torch_threads": torch.get_num_threads(),
            }
        )
        for command in commands():
            if command.get("op") == "stats":
                say({})  # hivemind keeps no batch counters we could read without its internals
    finally:
        server.shutdown()
        server.join(timeout=30)


def client(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)  # a trainer is another machine; here eight share two cores
    from hivemind.moe.client.expert import RemoteExpert
    from hivemind.moe.client.remote_expert_worker import RemoteExpertWorker
    from hivemind.moe.expert_uid import ExpertInfo
    from hivemind.p2p import P2P, PeerID

    p2p = RemoteExpertWorker.run_coroutine(P2P.create(initial_peers=args.address))
    try:
        peer = PeerID.from_base58(args.peer_id)
        experts = [RemoteExpert(ExpertInfo(f"expert.{i}", peer), p2p) for i in range(args.experts)]
        rng = random.Random(args.seed)
        inputs = torch.randn(
            args.batch, args.hidden, generator=torch.Generator().manual_seed(args.seed)
        )

        def step() -> tuple[float, float]:
            expert = rng.choice(experts)
            started = time.perf_counter()
            out = expert(inputs)
            middle = time.perf_counter()
            out.sum().backward()  # the server's backward: recompute, gradients, Adam step
            return middle - started, time.perf_counter() - middle

        for _ in range(args.warmup):
            step()
        say({"ready": True})
        for command in commands():
            if command.get("op") != "run":
                break
            forward: list[float] = []
            backward: list[float] = []
            errors: list[str] = []
            started = time.perf_counter()
            deadline = started + float(command["duration"])
            while time.perf_counter() < deadline:
                try:
                    f, b = step()
                except Exception as exc:  # counted and reported, as on our side
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
                    continue
                forward.append(f)
                backward.append(b)
            say(
                {
                    "steps": len(forward),
                    "samples": len(forward) * args.batch,
                    "forward_s": forward,
                    "backward_s": backward,
                    "errors": errors[:5],
                    "error_count": len(errors),
                    "wall_s": time.perf_counter() - started,
                }
            )
    finally:
        RemoteExpertWorker.run_coroutine(p2p.shutdown())


def end_descendants() -> None:
    """Terminate, by PID, any process this one started that is still alive (an orphaned p2pd)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2 :].split()[1]), []).append(int(entry))
    stack, found = [os.getpid()], []
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("role", choices=["serve", "client"])
    parser.add_argument("--experts", type=int, required=True)
    parser.add_argument("--hidden", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--handlers", type=int, default=4)
    parser.add_argument("--torch-threads", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peer-id", default="")
    parser.add_argument("--address", nargs="*", default=[])
    args = parser.parse_args()
    try:
        if args.role == "serve":
            serve(args)
        else:
            client(args)
    finally:
        if os.path.isdir("/proc"):
            end_descendants()


if __name__ == "__main__":
    main()
