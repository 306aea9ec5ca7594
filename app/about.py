"""The About box: the version, where Barnraise keeps things on this computer, what it trains on.

Its text is built by ``about_text`` from plain values (tested without Qt). The app's own folders are
known at once; the engine's diagnostics (its version, torch, the folders it uses, which differ when
it runs under another ``BARNRAISE_HOME``) are added when they arrive.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget

from app.diagnostics import app_version
from app.engine.store import EngineStore
from core.api.errors import ApiError
from core.api.logs import user_folders
from core.api.schema import Diagnostics


def training_device(store: EngineStore) -> str:
    """What the About box says Barnraise trains on (the one place it learns that).

    The device the engine found (``EngineState.device``: its name and why), else, from an engine
    that does not say, the active project's device setting (``ProjectInfo.device``)."""
    state = store.state
    detected = state.device if state is not None else None
    if detected is not None and detected.name:
        return f"{detected.name} ({detected.reason})" if detected.reason else detected.name
    project = state.project if state is not None else None
    if project is None:
        projects = [p for p in store.projects or [] if p.active]
        project = projects[0] if projects else None
    if project is None:
        return "nothing yet (no project is active)"
    return f"{project.device} (for {project.name})"


def about_text(
    *,
    version: str,
    folders: Mapping[str, Path],
    device: str,
    engine: Diagnostics | None = None,
    engine_note: str | None = None,
) -> str:
    lines = [
        f"Version {version} (Python {sys.version.split()[0]})",
        f"Trains on: {device}",
        "",
        *(f"{name}: {path}" for name, path in folders.items()),
    ]
    if engine is not None:
        torch = engine.torch or "not loaded yet"
        lines += ["", f"Engine {engine.engine_version}, pid {engine.pid}, torch {torch}"]
        ours = {str(p) for p in folders.values()}
        lines += [
            f"Engine's {name}: {path}"
            for name, path in sorted(engine.paths.items())
            if path not in ours and name in ("config", "data", "cache", "logs")
        ]
    elif engine_note:
        lines += ["", f"Engine: {engine_note}"]
    return "\n".join(lines)


class AboutBox:
    """A non-modal message box; ``text()`` is what it shows."""

    def __init__(self, store: EngineStore, parent: QWidget | None = None) -> None:
        self.store = store
        self.box = QMessageBox(parent)
        self.box.setWindowTitle("About Barnraise")
        self.box.setIcon(QMessageBox.Icon.Information)
        self.box.setText(
            "Barnraise lends this computer's idle time to deep-learning models that volunteers "
            "train together."
        )
        self.box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.box.setStandardButtons(QMessageBox.StandardButton.Close)
        self._show(None, "asking the engine…" if store.connected else "not connected")
        if store.connected:
            call = store.diagnostics()
            call.succeeded.connect(lambda d: self._show(d if isinstance(d, Diagnostics) else None))
            call.failed.connect(self._failed)

    def _failed(self, error: ApiError) -> None:
        self._show(None, f"no answer ({error})")

    def _show(self, engine: Diagnostics | None, note: str | None = None) -> None:
        self.box.setInformativeText(
            about_text(
                version=app_version(),
                folders=user_folders(),
                device=training_device(self.store),
                engine=engine,
                engine_note=note,
            )
        )

    def text(self) -> str:
        return self.box.informativeText()

    def open(self) -> None:
        self.box.open()
