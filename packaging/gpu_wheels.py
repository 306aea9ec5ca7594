"""Wheels of the project's dependencies that a GPU machine's own Python lacks, for a machine that
reaches no package index: fetched here, carried there, installed beside its PyTorch.

    python3 packaging/gpu_wheels.py .whl                      # CPython 3.12 on x86-64 Linux
    python3 packaging/gpu_wheels.py .whl --python-version 3.11

On the GPU machine, before ``python3 packaging/dev.py gpu-check``:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site

The GPU machines this was written for run an image with PyTorch, numpy, scipy, aiohttp, msgpack,
psutil, pyarrow, pandas, tokenizers, pytest and nvidia-ml-py already installed (read from its
package list in November 2026); what is missing of this project's runtime and test dependencies is
``CARRY``, with what those need in turn. Versions are the ones ``constraints.txt`` pins, so the
GPU run uses what the suite tested. Only the standard library is used here.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "packaging" / "constraints.txt"
CARRY = (
    # the DHT's and peers' identities and TLS
    "cryptography", "cffi", "pycparser",
    # HTTPS that trusts the system's store; UPnP port mapping
    "truststore", "async-upnp-client", "defusedxml", "python-didl-lite", "voluptuous",
    # the data pipeline's Hugging Face datasets reader
    "datasets", "dill", "multiprocess",
    # the keyring behind stored passes, and what it needs on Linux
    "keyring", "jaraco.classes", "jaraco.functools", "jaraco.context", "more-itertools",
    "SecretStorage", "jeepney",
    "platformdirs",
    # the async tests
    "pytest-asyncio",
)  # fmt: skip
BEFORE_312 = ("backports.tarfile", "importlib_metadata", "lazy-importer")
"""What keyring and jaraco.context need on Pythons older than 3.12 only."""
PLATFORMS = (
    "manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64",
)  # fmt: skip


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned() -> dict[str, str]:
    """Name (normalised) to version, from the constraints file."""
    pins = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line.strip())
        if match:
            pins[_key(match.group(1))] = match.group(2)
    return pins


def requirements(python_version: str) -> list[str]:
    pins = pinned()
    minor = int(python_version.split(".")[1])
    names = CARRY + (BEFORE_312 if minor < 12 else ())
    missing = [name for name in names if _key(name) not in pins]
    if missing:
        raise SystemExit(f"gpu_wheels: {', '.join(missing)} not pinned in {CONSTRAINTS}")
    return [f"{name}=={pins[_key(name)]}" for name in names]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dest", type=Path, help="the folder the wheels go to")
    parser.add_argument("--python-version", default="3.12")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python_version):
        parser.error(f"--python-version must look like 3.12, not {args.python_version!r}")
    args.dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", args.python_version, "--implementation", "cp"]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    command += ["-d", str(args.dest), *requirements(args.python_version)]
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        return done.returncode
    total = sum(p.stat().st_size for p in args.dest.glob("*.whl"))
    print(f"{len(list(args.dest.glob('*.whl')))} wheels, {total / 2**20:.1f} MiB in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
