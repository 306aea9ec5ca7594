"""Before Qt starts: can it use this display? If not, say what is missing instead of crashing.

On Linux with X11, Qt's ``xcb`` platform plugin needs system libraries that minimal installs lack
(libxcb-cursor0 since Qt 6.5, libxcb-icccm4, libxcb-keysyms1, ...). Without them Qt aborts the
process with a message few volunteers can act on. This loads the plugin the way Qt would and turns
a failure into one sentence naming the missing library and the packages to install.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import PySide6

NO_USABLE_DISPLAY = 3
"""The app's exit status when the display cannot be used (``dev.py run`` then runs headless)."""

DEBIAN = (
    "libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 "
    "libxcb-shape0 libxcb-xkb1 libxkbcommon-x11-0"
)
FEDORA = "xcb-util-cursor xcb-util-wm xcb-util-keysyms xcb-util-image xcb-util-renderutil"


def uses_xcb(environ: Mapping[str, str], platform: str = sys.platform) -> bool:
    """Whether Qt will pick its X11 plugin here."""
    if not platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return False
    chosen = environ.get("QT_QPA_PLATFORM", "")
    if chosen:
        return chosen.startswith("xcb")
    return bool(environ.get("DISPLAY")) and not environ.get("WAYLAND_DISPLAY")


def display_problem(
    environ: Mapping[str, str] = os.environ, plugin: Path | None = None
) -> str | None:
    """None when Qt can use the display; else what is missing, for the user."""
    if not uses_xcb(environ):
        return None
    plugin = plugin or Path(PySide6.__file__).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    missing = []
    if plugin.exists():
        try:
            ctypes.CDLL(str(plugin))
        except OSError as exc:
            missing.append(str(exc).split(":")[0])
    if ctypes.util.find_library("xcb-cursor") is None:
        missing.append("libxcb-cursor.so.0")
    if not missing:
        return None
    return (
        f"the desktop app cannot use the X11 display {environ.get('DISPLAY', '')}: Qt needs "
        f"{', '.join(dict.fromkeys(missing))}, which this system lacks. Install the X11 libraries "
        f"Qt uses (Debian/Ubuntu: sudo apt install {DEBIAN}; Fedora: sudo dnf install {FEDORA}) "
        "and start Barnraise again"
    )
