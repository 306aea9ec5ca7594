"""Injectable time (``core.util.clock``), named here because the app reaches ``core`` only through
``core.api``: the app's supervisor takes a ``Clock`` as the engine's services do."""

from core.util.clock import SYSTEM_CLOCK, Clock, FakeClock, SystemClock

__all__ = ["SYSTEM_CLOCK", "Clock", "FakeClock", "SystemClock"]
