"""Processes left out of "other programs' CPU use" (a local demo swarm's): fake counters for how
processes that appear, vanish or lose their pid are counted, and one real busy process."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator

import psutil
import pytest

from core.scheduler import CpuSample, CpuShareWindow, ExcludedCpu, ProcessKey, SystemSensor
from core.util.clock import FakeClock
from tests.support.leaks import wait_until_blocking


class FakeTable:
    """Processes as a dict: key -> CPU-seconds; ``tree`` says which pid has which descendants."""

    def __init__(self) -> None:
        self.cpu: dict[ProcessKey, float] = {}
        self.tree: dict[int, list[int]] = {}
        self.expanded: list[list[int]] = []

    def expand(self, pids: Iterable[int]) -> list[ProcessKey]:
        asked = list(pids)
        self.expanded.append(asked)
        wanted: list[int] = []
        for pid in asked:
            wanted += [pid, *self.tree.get(pid, [])]
        return [key for key in self.cpu if key[0] in wanted]

    def cpu_seconds(self, key: ProcessKey) -> float | None:
        return self.cpu.get(key)


def test_only_time_used_between_two_readings_of_a_process_counts() -> None:
    table, clock = FakeTable(), FakeClock()
    swarm, aux = (100, 1.0), (101, 2.0)
    table.cpu = {swarm: 50.0, aux: 500.0}
    table.tree = {100: [101]}
    excluded = ExcludedCpu(lambda: [100], refresh_every=0.0, clock=clock, table=table, own_pid=1)
    assert excluded.sample() == 0.0  # lifetimes before the first reading are not this window's
    table.cpu = {swarm: 51.0, aux: 502.0}
    assert excluded.sample() == pytest.approx(3.0)

    # a trainer appears with 40 s behind it: nothing of that counts, only its next second
    trainer = (102, 3.0)
    table.tree = {100: [101, 102]}
    table.cpu = {swarm: 51.5, aux: 503.0, trainer: 40.0}
    assert excluded.sample() == pytest.approx(4.5)
    table.cpu = {swarm: 51.5, aux: 503.0, trainer: 41.0}
    assert excluded.sample() == pytest.approx(5.5)

    # the backbone exits: it adds nothing more, and nothing goes negative
    table.tree = {100: [102]}
    table.cpu = {swarm: 52.0, trainer: 41.0}
    assert excluded.sample() == pytest.approx(6.0)

    # its pid is reused by an unrelated process: a new key, so its own lifetime does not count
    stranger = (101, 9.0)
    table.tree = {100: [101, 102]}  # (as if it were a child: still only deltas would count)
    table.cpu = {swarm: 52.0, trainer: 41.0, stranger: 7000.0}
    assert excluded.sample() == pytest.approx(6.0)


def test_the_provider_is_asked_only_every_few_seconds_and_never_names_us() -> None:
    table, clock = FakeTable(), FakeClock()
    asked: list[float] = []

    def provider() -> list[int]:
        asked.append(clock.monotonic())
        return [7, 100]  # 7 is the engine itself here

    table.cpu = {(7, 1.0): 10.0, (100, 1.0): 10.0}
    excluded = ExcludedCpu(provider, refresh_every=5.0, clock=clock, table=table, own_pid=7)
    for step in range(25):
        clock.advance_to(step * 0.5)
        table.cpu = {(7, 1.0): 10.0 + step, (100, 1.0): 10.0 + step}
        excluded.sample()
    assert asked == [0.0, 5.0, 10.0]
    assert table.expanded == [[100], [100], [100]]
    assert excluded.total == pytest.approx(24.0)  # the engine's own seconds are not in it


def test_a_failing_provider_keeps_the_last_answer(caplog: pytest.LogCaptureFixture) -> None:
    table, clock = FakeTable(), FakeClock()
    answers: Iterator[list[int]] = iter([[100]])

    def provider() -> list[int]:
        return next(answers)  # StopIteration after the first call stands for any failure

    table.cpu = {(100, 1.0): 1.0}
    excluded = ExcludedCpu(provider, refresh_every=0.0, clock=clock, table=table, own_pid=1)
    excluded.sample()
    table.cpu = {(100, 1.0): 3.0}
    clock.advance_to(1.0)
    assert excluded.sample() == pytest.approx(2.0)
    assert "cannot tell which processes" in caplog.text


def test_the_window_subtracts_excluded_time_like_our_own() -> None:
    window = CpuShareWindow(10.0)
    # 2 CPUs, both busy for 2 s: 1 CPU-second ours, 2 the swarm's, 1 another program's
    assert window.add(CpuSample(0.0, 0.0, 0.0, 0.0), 2) is None
    assert window.add(CpuSample(2.0, 4.0, 1.0, 2.0), 2) == pytest.approx(25.0)
    assert window.add(CpuSample(4.0, 8.0, 2.0, 4.0), 2) == pytest.approx(25.0)


BUSY_FAMILY = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
print(child.pid, flush=True)
child.wait()
"""


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def test_a_busy_child_of_an_excluded_process_is_not_another_program() -> None:
    # the busy process is the *child* of the one named, as trainers are children of the swarm
    parent = subprocess.Popen(
        [sys.executable, "-c", BUSY_FAMILY], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        busy = psutil.Process(int(parent.stdout.readline()))
        plain = SystemSensor(window_seconds=30.0)
        leaving_out = SystemSensor(
            window_seconds=30.0, exclude=lambda: [parent.pid], exclude_every=60.0
        )
        plain.read()
        leaving_out.read()
        used_before = cpu_seconds(busy)
        started = time.monotonic()
        # until the busy child has used a clear amount of CPU, however loaded the machine is
        wait_until_blocking(lambda: cpu_seconds(busy) - used_before >= 0.5)
        with_it = plain.read().other_cpu_percent
        without_it = leaving_out.read().other_cpu_percent
        used = cpu_seconds(busy) - used_before
        span = time.monotonic() - started
    finally:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(parent.pid).children(recursive=True):
                child.kill()
                child.wait(10)
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    assert with_it is not None
    assert without_it is not None
    share = used / (span * (psutil.cpu_count() or 1)) * 100
    # both sensors read the same counters at almost the same moments: they differ by its share
    # (the plain one may be clamped at 100 %, so only "at least half of it" is asserted)
    assert without_it <= with_it - share / 2, (with_it, without_it, share)
