"""Idleness from systemd-logind (``loginctl``), the Linux fallback when X11 cannot tell (Wayland).

The desktop sets the session's ``IdleHint`` once the user has been away for its own idle delay
(GNOME: the screen-blank delay), so "not idle" reads as 0 seconds and "idle" as the time since
``IdleSinceHintMonotonic``. Each look-up runs ``loginctl``, which is slow next to the engine's
polling, so the answer is kept for a few seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from core.scheduler.sensor import PolledIdleSensor, Reading
from core.util.clock import SYSTEM_CLOCK, Clock


def parse_properties(output: str) -> dict[str, str]:
    """``loginctl show-*`` output ("Name=value" lines) as a dict."""
    properties: dict[str, str] = {}
    for line in output.splitlines():
        name, sep, value = line.partition("=")
        if sep:
            properties[name.strip()] = value.strip()
    return properties


def idle_from_output(output: str, now_monotonic: float) -> Reading[float]:
    """Idle seconds from ``show-session -p IdleHint -p IdleSinceHintMonotonic`` output.

    ``now_monotonic`` is CLOCK_MONOTONIC in seconds (``time.monotonic()`` on Linux), the clock
    logind's microsecond timestamp is on.
    """
    properties = parse_properties(output)
    hint = properties.get("IdleHint")
    if hint == "no":
        return Reading(0.0)
    if hint != "yes":
        return Reading(None, "logind did not report whether the session is idle")
    try:
        since_us = int(properties.get("IdleSinceHintMonotonic", ""))
    except ValueError:
        since_us = 0
    if since_us <= 0:
        return Reading(None, "logind reports the session idle but not since when")
    return Reading(max(0.0, now_monotonic - since_us / 1e6))


class LogindIdleSensor(PolledIdleSensor):
    def __init__(
        self,
        *,
        command: str = "loginctl",
        cache_seconds: float = 5.0,
        timeout: float = 2.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__()
        self._command = command
        self._cache_seconds = cache_seconds
        self._timeout = timeout
        self._clock = clock
        self._session: str | None = None
        self._fetched_at = -float("inf")
        self._output: Reading[str] = Reading(None, "not asked yet")

    def read(self) -> Reading[float]:
        now = self._clock.monotonic()
        if now - self._fetched_at >= self._cache_seconds:
            self._output = self._fetch()
            self._fetched_at = now
        if self._output.value is None:
            return Reading(None, self._output.note)
        return idle_from_output(self._output.value, now)

    def _fetch(self) -> Reading[str]:
        if self._session is None:
            session = self._find_session()
            if session.value is None:
                return session
            self._session = session.value
        output = self._run(
            "show-session", self._session, "-p", "IdleHint", "-p", "IdleSinceHintMonotonic"
        )
        if output.value is None:
            self._session = None  # the session may have ended; look again next time
        return output

    def _find_session(self) -> Reading[str]:
        """The user's graphical session, else this process's own (a console login)."""
        user = self._run("show-user", _user_id(), "-p", "Display")
        display = parse_properties(user.value or "").get("Display", "")
        if display:
            return Reading(display)
        own = os.environ.get("XDG_SESSION_ID", "")
        if own:
            return Reading(own)
        return Reading(None, user.note or "you have no login session that logind knows of")

    def _run(self, *args: str) -> Reading[str]:
        path = shutil.which(self._command)
        if path is None:
            return Reading(None, f"{self._command} is not installed")
        try:
            done = subprocess.run(
                [path, *args],
                capture_output=True,
                text=True,
                timeout=self._timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Reading(None, f"{self._command} did not answer within {self._timeout:g} s")
        except OSError as exc:
            return Reading(None, f"cannot run {self._command}: {exc}")
        if done.returncode != 0:
            first_line = (done.stderr.strip().splitlines() or ["no message"])[0]
            return Reading(None, f"{self._command} failed: {first_line}")
        return Reading(done.stdout)


def _user_id() -> str:
    """This user's numeric id, as ``loginctl show-user`` takes it."""
    # if/else rather than an early return: type checkers skip the other platform's branch
    if sys.platform == "win32":
        return ""  # no logind there; loginctl is missing and says so
    else:
        return str(os.getuid())
