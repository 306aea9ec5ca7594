"""ProjectUrlField: the "Project URL" row of the first run (BOINC's "Add project"), and its check.

A volunteer pastes the address the organizers publish and presses "Look up" (or Enter). What is
plainly not a project URL — a bare host name, a file, a word — is answered here, in words, without
asking the engine; the rest goes out through ``lookupRequested``. The text is never cleared by a
problem: the user corrects it in place.
"""

from __future__ import annotations

import re

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget

from app.errors import explain
from core.api.errors import BadRequest
from core.api.project_url import MAX_URL_CHARS, ProjectUrl, is_project_url

EXAMPLE = "https://coord.example.org"
HOST_LIKE = re.compile(r"(?:localhost|[\w-]+(?:\.[\w-]+)+|\[[0-9a-fA-F:]+\])(?::\d+)?(?:[/?#]\S*)?")
"""A host name or address, maybe with a port and a path, but no scheme: "coord.example.org:8470"."""
FILE_LIKE = re.compile(r"(?:[/~.\\]|[A-Za-z]:[\\/]|file:)|.*\.toml$", re.IGNORECASE)


def url_problem(text: str) -> str | None:
    """Why ``text`` cannot be a project URL, in one sentence for the user; None when it may be."""
    text = text.strip()
    shown = text if len(text) <= 80 else text[:77] + "…"
    if not text:
        return f"Enter the project's address, for example {EXAMPLE}."
    if len(text) > MAX_URL_CHARS:
        return f"That is too long for a project address (over {MAX_URL_CHARS} characters)."
    if is_project_url(text):
        try:
            ProjectUrl.parse(text)  # the engine's own reading: no surprise after "Look up"
        except BadRequest as exc:
            return explain(exc, "reading the project URL")
        return None
    return _not_a_url(text, shown)


def _not_a_url(text: str, shown: str) -> str:
    """What ``text``, which has no http(s):// scheme, seems to be instead, and what to do."""
    if FILE_LIKE.match(text):
        return (
            "That looks like a file, not an address: use “Open a project file…” to join from a "
            "manifest on this computer."
        )
    if "://" in text:
        scheme = text.split("://", 1)[0][:20]
        return f"{scheme}:// addresses cannot be joined: a project address starts with https://."
    if HOST_LIKE.fullmatch(text):
        return (
            f"Add https:// in front: project addresses start with https:// (or http:// on a "
            f"local network), for example https://{shown}."
        )
    return (
        f"{shown} is not a project address. Paste the address the project's organizers give, "
        f"for example {EXAMPLE}."
    )


class ProjectUrlField(QWidget):
    lookupRequested = Signal(str)
    """A URL that passed the check, stripped, to preview."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(4)
        row = QHBoxLayout()
        self.label = QLabel("Project &URL:")
        self.edit = QLineEdit()
        self.edit.setPlaceholderText(EXAMPLE)
        self.edit.setToolTip(
            "The address of a project, as its organizers publish it: https://… "
            "(Enter looks it up; nothing is joined before you confirm)"
        )
        self.edit.setAccessibleName("Project URL")
        self.label.setBuddy(self.edit)
        self.button = QPushButton("&Look up")
        self.button.setToolTip("Fetch the project's description, check its signature and show it")
        self.button.setAccessibleName("Look up the project")
        row.addWidget(self.label)
        row.addWidget(self.edit, 1)
        row.addWidget(self.button)
        box.addLayout(row)
        self.message = QLabel("", objectName="inlineError", wordWrap=True)
        self.message.setTextFormat(Qt.TextFormat.PlainText)  # it may quote what was pasted
        self.message.setAccessibleName("Project URL problem")
        self.message.hide()
        box.addWidget(self.message)
        self.busy = False
        self.button.clicked.connect(self.look_up)
        self.edit.returnPressed.connect(self.look_up)
        self.edit.textEdited.connect(lambda _: self.message.hide())

    def text(self) -> str:
        return self.edit.text().strip()

    def look_up(self) -> None:
        if self.busy:
            return
        problem = url_problem(self.edit.text())
        if problem is not None:
            self.show_problem(problem)
            return
        self.message.hide()
        self.lookupRequested.emit(self.text())

    def show_problem(self, text: str) -> None:
        self.message.setText(text)
        self.message.show()
        self.edit.setFocus()

    def set_busy(self, busy: bool) -> None:
        """While the engine looks the project up: the text stays, read-only, and is not resent."""
        self.busy = busy
        self.edit.setReadOnly(busy)
        self.button.setEnabled(not busy)
        self.button.setText("Looking up…" if busy else "&Look up")
