"""What the sensors saw at one moment, plus the engine's own state: the input to ``decide``.

``None`` always means "cannot tell"; ``notes`` says why, in words the user can act on.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuState:
    free_mb: float | None
    total_mb: float | None
    temperature_c: float | None


@dataclass(frozen=True)
class Conditions:
    idle_seconds: float | None
    """Seconds since the last keyboard or mouse input; ``None``: cannot tell."""
    on_battery: bool | None
    """``None``: cannot tell, or no battery information."""
    battery_percent: float | None
    other_cpu_percent: float | None
    """Other programs' CPU use, percent of the whole machine."""
    available_memory_mb: float | None
    cpu_count: int
    """CPUs this process may run on."""
    gpu: GpuState | None
    """``None``: no GPU in use, or cannot tell."""
    network_mb_this_month: float = 0.0
    uses_gpu: bool = False
    """The attached project trains on a GPU."""
    has_project: bool = True
    user_paused: bool = False
    """The user pressed pause."""
    snoozed_until: float | None = None
    """Unix time; paused until then."""
    headless: bool = False
    """No user session: keyboard and mouse idleness does not apply."""
    notes: tuple[str, ...] = ()
    """The sensors' "cannot tell because ..." explanations."""
