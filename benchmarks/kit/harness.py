"""What the benchmark scripts share: peer processes driven over pipes, the hivemind reference, output.

Each benchmark runs every peer as its own OS process (``--worker``). The driver writes one JSON
command per line to a worker's stdin and reads one JSON reply per line from its stdout; the first
line a worker prints is its address. Results go to stdout and, with ``--json``, to a file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any, Self

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: every benchmark runs from here, as ``python -m benchmarks.<room>.<name>``."""


def as_module(spec: ModuleSpec | None) -> list[str]:
    """``-m NAME``: how a benchmark starts another process of itself (its workers), given its
    ``__spec__``; from the repository root, as every benchmark runs."""
    if spec is None:
        raise SystemExit("run the benchmarks as modules: python -m benchmarks.<room>.<name>")
    return ["-m", spec.name]


def tensor_for(seed: int, round_index: int, peer: int, numel: int) -> np.ndarray:
    """The input of one peer in one round, reproducible in any process (for the exact-mean check)."""
    return np.random.default_rng([seed, round_index, peer]).standard_normal(numel, dtype=np.float32)


# ---- the worker side -----------------------------------------------------------------------------


async def commands() -> AsyncIterator[dict[str, Any]]:
    """The driver's commands, one per stdin line, until it closes the pipe."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        yield dict(json.loads(line))


def reply(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


# ---- the driver side -----------------------------------------------------------------------------


class PeerProcess:
    """One worker process and the pipe conversation with it."""

    def __init__(self, proc: asyncio.subprocess.Process, address: str) -> None:
        self.proc = proc
        self.address = address
        self.peer_id = address.rsplit("/", 1)[-1]

    @classmethod
    async def start(cls, argv: list[str], prefix: Sequence[str] = ()) -> Self:
        """Starts ``python argv...`` in the repository root and waits for the address it prints
        (``argv`` begins with ``as_module(__spec__)`` for a benchmark's own workers).

        ``prefix`` runs it through another command (``ip netns exec NS``: inside a lab namespace).
        """
        proc = await asyncio.create_subprocess_exec(
            *prefix,
            sys.executable,
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
            limit=1 << 20,
        )
        assert proc.stdout is not None
        line = await proc.stdout.readline()
        if not line:
            await proc.wait()
            raise RuntimeError(f"a peer exited before saying its address (exit {proc.returncode})")
        return cls(proc, str(json.loads(line)["address"]))

    async def ask(self, **command: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write((json.dumps(command) + "\n").encode())
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError("a peer exited")
        return dict(json.loads(line))


async def stop_all(peers: list[PeerProcess]) -> None:
    """Closes every worker's stdin (its signal to shut down cleanly) and waits for all of them."""
    for peer in peers:
        if peer.proc.stdin is not None:
            peer.proc.stdin.close()
    await asyncio.gather(*(p.proc.wait() for p in peers))


def precompile() -> None:
    """Byte-compiles core once so that workers started together do not all compile it at once."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "core")], check=True)


# ---- the reference and the output ----------------------------------------------------------------


def add_reference_options(parser: Any) -> None:
    parser.add_argument("--no-hivemind", action="store_true", help="skip the reference run")
    parser.add_argument(
        "--hivemind-python", default=str(ROOT / ".venv-hivemind" / "bin" / "python")
    )
    parser.add_argument(
        "--hivemind-ref", default=str(ROOT.parent / "shared" / "bench" / "hivemind_ref.py")
    )


def run_reference(python: str, harness: str, argv: list[str]) -> dict[str, Any] | None:
    """Runs ``hivemind_ref.py --json FILE argv...`` with hivemind's interpreter; None if it cannot."""
    interpreter, script = Path(python), Path(harness)
    if not interpreter.exists() or not script.exists():
        print(f"hivemind reference skipped: {interpreter} or {script} is missing", file=sys.stderr)
        return None
    out = ROOT / f".hivemind-{argv[0]}.json"
    command = [str(interpreter), str(script), "--json", str(out), *argv]
    try:
        subprocess.run(command, check=False, capture_output=True, timeout=900)
        return dict(json.loads(out.read_text()))
    except (subprocess.TimeoutExpired, OSError, ValueError) as exc:
        print(f"hivemind reference failed: {exc}", file=sys.stderr)
        return None
    finally:
        out.unlink(missing_ok=True)


def side_by_side(ours: float | None, theirs: float | None) -> dict[str, Any]:
    return {
        "barnraise": ours,
        "hivemind": theirs,
        "ratio": round(ours / theirs, 3) if ours is not None and theirs else None,
    }


def emit(result: dict[str, Any], path: Path | None) -> None:
    text = json.dumps(result, indent=2)
    print(text)
    if path is not None:
        path.write_text(text + "\n")


# ---- what the GPU benchmarks share -----------------------------------------------------------------

MASK_TOKEN = 4


def training_device(parser: argparse.ArgumentParser, asked: str) -> str:
    """``--device`` checked: cpu, mps, cuda or cuda:N; empty means cuda if torch sees one."""
    if not asked:
        import torch

        asked = "cuda" if torch.cuda.is_available() else "cpu"
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", asked):
        parser.error(f"--device must be cpu, mps, cuda or cuda:N, not {asked!r}")
    return asked


def mlm_batches(vocab: int, seq: int, size: int, seed: int) -> Any:
    """Masked-LM batches of random tokens (15 % masked), made on the host as a data loader would,
    the same for every run given the seed."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    while True:
        ids = torch.randint(MASK_TOKEN + 1, vocab, (size, seq), generator=generator)
        masked = torch.rand(ids.shape, generator=generator) < 0.15
        labels = torch.where(masked, ids, torch.full_like(ids, -100))
        inputs = torch.where(masked, torch.full_like(ids, MASK_TOKEN), ids)
        yield {"input_ids": inputs, "attention_mask": torch.ones_like(ids), "labels": labels}
