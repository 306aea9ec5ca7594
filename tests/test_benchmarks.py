"""The benchmark scripts still run and write the fields the README quotes (not their values)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_transport_benchmark_writes_its_json(tmp_path: Path) -> None:
    out = tmp_path / "transport.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "transport.py"),
            "--json",
            str(out),
            "--mbytes",
            "8",
            "--calls",
            "50",
            "--repeats",
            "1",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    result = json.loads(out.read_text())
    for key in ("p50", "p99"):
        assert result["rpc_roundtrip_us"][key] > 0
    for key in ("stream_MBps", "raw_tcp_MBps", "stream_to_raw_ratio"):
        assert result[key] > 0
    assert result["stream_integrity_ok"] is True
    assert result["tls"][1] == "TLSv1.3"
