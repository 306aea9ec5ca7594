"""Fault injection at expert servers, for the experiments of Learning@home (Section 4.2).

The paper trains under emulated network conditions: every expert call is delayed (100 ms or 1 s on
average) and in the failure experiment each expert fails to answer a request with probability 0.1.
``ServerFaults`` does both on a real ``ExpertServer``, per request, in the request's own handler
before it joins its pool (``ExpertServer(faults=...)``): a delayed request waits alone, and the
runner keeps computing other trainers' batches meanwhile, as a slow network link would behave.

- Latency is drawn from an exponential distribution with the configured mean: the paper's own
  choice (Section 4.1, after measurements of real latency), and the memoryless one-parameter
  distribution whose long tail is what makes a few calls very slow while most are quick.
- A failed request answers ``UnavailableError`` (after its delay, as a real failure is only noticed
  one round trip later): the trainer sees a typed error and drops the expert at once, instead of
  waiting for its timeout, so experiments measure the mixture's tolerance, not the timeout's length.

Draws come from one seeded generator, so a run with the same requests in the same order sees the
same faults. The counters say what was injected, so an experiment reports the rates it really had.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from core.net.errors import UnavailableError


@dataclass(frozen=True, slots=True)
class Fault:
    """What happens to one request: its delay in seconds and whether it then fails."""

    latency: float
    fails: bool


class ServerFaults:
    """Per-request latency (exponential, mean ``mean_latency`` s) and failures (``failure_rate``)."""

    def __init__(self, mean_latency: float = 0.0, failure_rate: float = 0.0, seed: int = 0) -> None:
        if not mean_latency >= 0:
            raise ValueError(f"the mean latency must be 0 or more seconds, not {mean_latency}")
        if not 0 <= failure_rate <= 1:
            raise ValueError(f"the failure rate must be between 0 and 1, not {failure_rate}")
        self.mean_latency = float(mean_latency)
        self.failure_rate = float(failure_rate)
        self._random = random.Random(seed)
        self.requests = 0
        self.failures = 0
        self.total_latency = 0.0
        """Seconds of delay drawn so far (over ``requests``: the realised mean latency)."""

    def draw(self) -> Fault:
        """The next request's fault; counted in the statistics."""
        latency = (
            self._random.expovariate(1.0 / self.mean_latency) if self.mean_latency > 0 else 0.0
        )
        # drawn every time, so the failures a seed gives do not depend on the latency setting
        fails = self._random.random() < self.failure_rate
        self.requests += 1
        self.failures += fails
        self.total_latency += latency
        return Fault(latency, fails)

    async def apply(self, uid: str, method: str) -> None:
        """Delay the current request, then raise ``UnavailableError`` if it is one that fails."""
        fault = self.draw()
        if fault.latency > 0:
            await asyncio.sleep(fault.latency)
        if fault.fails:
            raise UnavailableError(
                f"expert {uid[:64]} did not answer the {method} (injected fault)"
            )
