"""StepTally: a peer's work since its last report point (samples, losses, speed), which its record
tells; both modes' optimizers count with it."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass


@dataclass
class StepTally:
    """This peer's work since its last report point: samples, the sum of its finite losses and
    their count, and its speed (an average over recent steps). Both optimizers count with it."""

    samples: int = 0
    loss_sum: float = 0.0
    mini_steps: int = 0
    speed: float = 0.0
    last_step_at: float | None = None

    def count(self, batch_size: int, loss: float | None) -> float | None:
        """One step of ``batch_size`` samples; the seconds since the last one (None: the first
        since a pause or a reset)."""
        now = time.monotonic()
        gap = None
        if self.last_step_at is not None and now > self.last_step_at:
            gap = now - self.last_step_at
            rate = batch_size / gap
            self.speed = rate if self.speed == 0 else 0.8 * self.speed + 0.2 * rate
        self.last_step_at = now
        self.samples += batch_size
        if loss is not None and math.isfinite(loss):
            self.loss_sum += loss
            self.mini_steps += 1
        return gap

    def take(self) -> tuple[int, float, int]:
        """(samples, loss sum, mini-steps) so far, which start again from zero."""
        taken = (self.samples, self.loss_sum, self.mini_steps)
        self.samples, self.loss_sum, self.mini_steps = 0, 0.0, 0
        return taken

    def stop(self) -> None:
        """Paused: no speed, and the next step's gap is not a measure of it."""
        self.speed = 0.0
        self.last_step_at = None
