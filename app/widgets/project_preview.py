"""ProjectPreviewCard: a project looked up by its URL, shown before the user joins it.

Its name, its description, what kind of training it is, who may contribute, what it would use on
this computer (the device, the model's size, disk, network per hour, and the engine's notes), and
its project key, shortened, with how it was verified. Everything here comes from a stranger's
server, so every label shows its text as plain text: markup in a name or a description is shown as
typed, never rendered (no rich text, no images fetched, no links).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QPushButton, QWidget

from app import wording
from app.widgets.tiles import Card
from core.api.schema import ProjectPreview


def plain_label(object_name: str = "") -> QLabel:
    """A word-wrapped, selectable label that never interprets its text as markup."""
    label = QLabel("")
    label.setObjectName(object_name)
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class ProjectPreviewCard(Card):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Project preview")
        self.preview: ProjectPreview | None = None
        self.name = plain_label("stateWord")
        self.address = plain_label("caption")
        self.description = plain_label()
        self.description.setAccessibleName("Project description")
        for label in (self.name, self.address, self.description):
            self.box.addWidget(label)
        # a grid, not a form layout: wrapped labels in a QFormLayout get spare lines around them
        grid = QGridLayout()
        grid.setHorizontalSpacing(14)
        grid.setVerticalSpacing(6)
        grid.setColumnStretch(1, 1)
        self.kind = plain_label()
        self.access = plain_label()
        self.uses: dict[str, QLabel] = {}
        for title in ("Trains on", "Model", "Disk", "Network"):
            self.uses[title] = plain_label()
        rows: list[tuple[str, QLabel]] = [
            ("Kind", self.kind),
            ("Who can join", self.access),
            *self.uses.items(),
        ]
        self.titles: dict[str, QLabel] = {}
        for row, (title, value) in enumerate(rows):
            self.titles[title] = self._row_title(title)
            grid.addWidget(self.titles[title], row, 0, Qt.AlignmentFlag.AlignTop)
            grid.addWidget(value, row, 1)
        self.model_title = self.titles["Model"]
        self.notes = plain_label("caption")
        grid.addWidget(self.notes, len(rows), 1)
        key_row = QHBoxLayout()
        self.key = plain_label()
        self.copy_button = QPushButton("&Copy key")
        self.copy_button.setToolTip(
            "Copy the whole project key, to compare it with the one the organizers publish"
        )
        self.copy_button.clicked.connect(self._copy_key)
        key_row.addWidget(self.key, 1)
        key_row.addWidget(self.copy_button)
        grid.addWidget(self._row_title("Project key"), len(rows) + 1, 0)
        grid.addLayout(key_row, len(rows) + 1, 1)
        self.box.addSpacing(4)
        self.box.addLayout(grid)

    @staticmethod
    def _row_title(text: str) -> QLabel:
        title = QLabel(text)
        title.setObjectName("help")
        return title

    def show_preview(self, preview: ProjectPreview) -> None:
        self.preview = preview
        self.name.setText(preview.name)
        self.address.setText(f"{preview.url} · manifest version {preview.version}")
        self.description.setText(preview.description or "The project gives no description.")
        self.kind.setText(wording.project_kind(preview.kind))
        self.access.setText(wording.project_access(preview.mode, preview.allow_signup))
        rows = wording.resource_lines(preview.uses, preview.kind)
        for label, (title, text) in zip(self.uses.values(), rows, strict=True):
            label.setText(text)
            label.setAccessibleName(title)
        self.model_title.setText(rows[1][0])
        notes = preview.uses.notes
        self.notes.setText("\n".join(notes))
        self.notes.setVisible(bool(notes))
        check = wording.key_check(preview.key_source)
        self.key.setText(f"{wording.short_key(preview.project_key)} — {check}")
        self.key.setToolTip(f"The whole project key: {preview.project_key}")
        self.key.setAccessibleName("Project key")
        self.key.setAccessibleDescription(f"{preview.project_key}, {check}")

    def _copy_key(self) -> None:
        if self.preview is not None:
            QGuiApplication.clipboard().setText(self.preview.project_key)
