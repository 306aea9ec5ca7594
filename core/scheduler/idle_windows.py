"""Keyboard and mouse idleness on Windows: ``GetLastInputInfo`` against the tick count, via ctypes.

It sees the input of the session the process runs in, so a service in session 0 never sees the
user; the engine marks such runs headless.
"""

from __future__ import annotations

import ctypes
import sys

from core.scheduler.sensor import PolledIdleSensor, Reading


class _LastInputInfo(ctypes.Structure):
    _fields_ = (("cbSize", ctypes.c_uint), ("dwTime", ctypes.c_uint))


def idle_milliseconds(tick_count: int, last_input_tick: int) -> int:
    """Milliseconds between two 32-bit tick counts, correct across the 49.7-day wrap-around."""
    return (tick_count - last_input_tick) & 0xFFFFFFFF


class WindowsIdleSensor(PolledIdleSensor):
    def read(self) -> Reading[float]:
        # if/else rather than an early return: type checkers skip the other platform's branch
        if sys.platform == "win32":
            user32 = ctypes.windll.user32
            kernel32 = ctypes.windll.kernel32
            kernel32.GetTickCount64.restype = ctypes.c_ulonglong
            info = _LastInputInfo()
            info.cbSize = ctypes.sizeof(_LastInputInfo)
            if not user32.GetLastInputInfo(ctypes.byref(info)):
                return Reading(None, "GetLastInputInfo failed")
            # dwTime is the low 32 bits of the tick count, so compare in 32 bits
            now = int(kernel32.GetTickCount64()) & 0xFFFFFFFF
            return Reading(idle_milliseconds(now, info.dwTime) / 1000.0)
        else:
            return Reading(None, "GetLastInputInfo exists only on Windows")
