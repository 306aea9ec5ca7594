"""The page's static files (``GET /static/<name>``): its script, stylesheet and icon.

Only the names listed here are served, each from the data files (``core.util.process.resources``: the
checkout's ``resources/``, the wheel's ``core/resources``, a bundle's) with its own content type; a
file is read once and kept. A file missing from a broken installation is a 404 and one logged error.
"""

from __future__ import annotations

import logging

from core.util.process.resources import resource_path

log = logging.getLogger(__name__)

FILES = {
    "page.js": ("page/page.js", "text/javascript; charset=utf-8"),
    "page.css": ("page/page.css", "text/css; charset=utf-8"),
    "barnraise.svg": ("icons/barnraise.svg", "image/svg+xml"),
}
"""Name under ``/static/``: (data file, content type)."""


class StaticFiles:
    def __init__(self) -> None:
        self._read: dict[str, bytes] = {}

    def get(self, name: str) -> tuple[bytes, str] | None:
        """The file's bytes and content type; None for a name not served (or a file missing)."""
        if name not in FILES:
            return None
        source, content_type = FILES[name]
        data = self._read.get(name)
        if data is None:
            path = resource_path(source)
            try:
                data = path.read_bytes()
            except OSError as exc:
                log.error(
                    "the project page's %s cannot be read (%s): reinstall Barnraise", path, exc
                )
                return None
            self._read[name] = data
        return data, content_type
