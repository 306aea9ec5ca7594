"""Other programs' share of the machine's CPU, averaged over a sliding window of time.

The sensor feeds it cumulative counters (machine-wide busy CPU-seconds, this process's own, and
those of processes that are not "other programs", such as a demo swarm this engine joins; see
``excluded_cpu``); the share is the busy time less the other two over the window, divided by the
CPUs' capacity in that time. Averaging over seconds keeps one short spike (a browser tab loading)
from flipping the decision back and forth.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuSample:
    at: float
    """Monotonic seconds."""
    busy: float
    """Machine-wide busy CPU-seconds since boot."""
    own: float
    """This process's CPU-seconds since it started."""
    excluded: float = 0.0
    """CPU-seconds of processes left out of "other programs", counted since the sensor started."""


class CpuShareWindow:
    """Keeps a few samples spanning ``window_seconds``; memory stays bounded at any polling rate."""

    def __init__(self, window_seconds: float = 10.0, *, min_span: float = 0.1) -> None:
        if window_seconds <= 0:
            raise ValueError("the window must be longer than 0 seconds")
        self._window = window_seconds
        self._min_span = min_span
        # keeping one sample per twentieth of the window is precise enough and caps the deque
        self._spacing = window_seconds / 20
        self._samples: deque[CpuSample] = deque()

    def add(self, sample: CpuSample, cpu_count: int) -> float | None:
        """Other programs' CPU use in percent of the whole machine; ``None`` until measurable."""
        samples = self._samples
        if samples and sample.at < samples[-1].at:
            samples.clear()  # a clock that went backwards cannot be averaged over
        if not samples or sample.at - samples[-1].at >= self._spacing:
            samples.append(sample)
        # drop samples only while the next one still covers the whole window
        while len(samples) >= 2 and samples[1].at <= sample.at - self._window:
            samples.popleft()
        oldest = samples[0]
        span = sample.at - oldest.at
        if span < self._min_span:
            return None
        other = (
            (sample.busy - oldest.busy)
            - (sample.own - oldest.own)
            - (sample.excluded - oldest.excluded)
        )
        percent = other / (span * max(1, cpu_count)) * 100.0
        # the counters tick in hundredths of a second on their own schedules; clamp that noise
        return min(100.0, max(0.0, percent))
