"""Whether this session has a desktop to open a window on (stdlib only: the launcher asks first).

Windows and macOS sessions have one unless they are headless services, which do not run
``barnraise`` without arguments; on Linux and the BSDs a window needs an X11 or Wayland display,
or a Qt platform plugin chosen on purpose (``QT_QPA_PLATFORM``, e.g. offscreen for tests).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping


def display_available(environ: Mapping[str, str], platform: str = sys.platform) -> tuple[bool, str]:
    """(available, why) — ``why`` names what was found or missing, for messages."""
    if platform.startswith(("win32", "cygwin")) or platform == "darwin":
        return True, f"a {platform} desktop session"
    for variable in ("WAYLAND_DISPLAY", "DISPLAY", "QT_QPA_PLATFORM"):
        if environ.get(variable):
            return True, f"{variable}={environ[variable]}"
    return False, "no display: neither DISPLAY nor WAYLAND_DISPLAY (nor QT_QPA_PLATFORM) is set"
