"""Small measuring helpers shared by the MoE benchmarks: percentiles, latency summaries, and the
CPU time of a process tree and of the whole machine, read from Linux's ``/proc`` (so a figure can
say how much of the machine other programs took while it was measured)."""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from pathlib import Path


def descendants(root: int) -> list[int]:
    """PIDs of every live descendant of ``root`` (Linux ``/proc``; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def tree_cpu_s(root: int) -> float | None:
    """User + system CPU seconds of ``root`` and its live descendants (None without ``/proc``)."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    for pid in [root, *descendants(root)]:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            if pid == root:
                return None
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / ticks


def machine_busy_s() -> float | None:
    """CPU seconds every core of the machine has spent busy since boot (None without ``/proc``)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def cpu_snapshot(server: int, clients: list[int]) -> dict[str, float | None]:
    """CPU seconds so far: the whole machine's, the server's process tree's, the trainers'."""
    per_client = [tree_cpu_s(pid) for pid in clients]
    return {
        "machine": machine_busy_s(),
        "server": tree_cpu_s(server),
        "clients": None if None in per_client else sum(c for c in per_client if c is not None),
    }


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def latency_ms(seconds: Sequence[float]) -> dict[str, float] | None:
    if not seconds:
        return None
    return {
        "p50_ms": round(1000 * pct(seconds, 0.5), 1),
        "p99_ms": round(1000 * pct(seconds, 0.99), 1),
        "mean_ms": round(1000 * statistics.mean(seconds), 1),
    }


def ms_stats(seconds: Sequence[float]) -> dict[str, float]:
    ms = [1000 * s for s in seconds]
    return {
        "mean_ms": round(statistics.mean(ms), 1),
        "sd_ms": round(statistics.stdev(ms), 1) if len(ms) > 1 else 0.0,
        "p50_ms": round(pct(ms, 0.5), 1),
        "p99_ms": round(pct(ms, 0.99), 1),
        "max_ms": round(max(ms), 1),
    }
