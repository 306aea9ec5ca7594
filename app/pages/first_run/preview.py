"""PreviewFace: a project looked up by its URL, shown before anything is joined.

The engine fetched the project's signed manifest and checked the signature; the card says what the
project is and what it would use here. In Add project the face also says what joining does to the
project this computer contributes to now, and offers to contribute to the new one instead (ticked
anew for each project looked up, as a BOINC volunteer adding a project expects to work for it), or
to attach it beside the active one, where it waits.

A link that names no project key (no ``#key=``) was checked against nothing: whoever answered
signed what the card shows, and joining would trust that key from now on. The face then warns,
naming the key that answered (louder for a plain ``http://`` address, where anyone on the way can
answer), and the project may be joined only once "Trust this key" is ticked (``key_trusted``),
unticked anew for each project looked up.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from app import wording
from app.engine.store import EngineStore
from app.widgets.project_preview import ProjectPreviewCard, plain_label
from core.api.schema import ProjectPreview


def joining_note(new: str, current: str | None, *, instead: bool) -> str:
    """What joining ``new`` does while ``current`` is the project the engine contributes to;
    ``instead``: the volunteer chose to contribute to ``new`` instead of ``current``."""
    if current is None:
        return f"Joining makes {new} the project this computer contributes to."
    if instead:
        return (
            f"Joining makes {new} the project this computer contributes to, instead of {current} "
            f"(one at a time): {current} stays attached, and what it counted stays counted."
        )
    return (
        f"Joining attaches {new} beside {current}, which stays the project this computer "
        f"contributes to (one at a time); to switch later, run barnraise ctl activate {new}."
    )


class PreviewFace(QScrollArea):
    trustChanged = Signal()
    """Whether the project may be joined changed ("Trust this key" ticked or not)."""

    def __init__(self, store: EngineStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.adding = False
        """Add project: say what joining does to the active project, offer the switch."""
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        holder = QWidget()
        holder.setObjectName("page")  # the page's background, not the scroll area's
        box = QVBoxLayout(holder)
        box.setContentsMargins(0, 8, 0, 0)
        box.addWidget(
            QLabel(
                "Barnraise fetched this project's description and checked its signature. Join it, "
                "or go back: nothing has been joined yet.",
                wordWrap=True,
            )
        )
        self.joining = plain_label()
        self.joining.setAccessibleName("What joining does")
        self.joining.hide()
        box.addWidget(self.joining)
        self.instead_box = QCheckBox()
        self.instead_box.setToolTip(
            "Ticked: this computer stops working for the project it contributes to now and works "
            "for this one (one at a time). Unticked: this one is attached beside it and waits"
        )
        self.instead_box.toggled.connect(lambda _: self._say_what_joining_does())
        self.instead_box.hide()
        box.addWidget(self.instead_box)
        box.addWidget(self._key_warning())
        self.card = ProjectPreviewCard()
        box.addWidget(self.card)
        box.addStretch(1)
        self.setWidget(holder)

    def _key_warning(self) -> QFrame:
        """The warning of a key nobody checked, with the box that trusts it (hidden otherwise)."""
        self.key_warning = QFrame()
        self.key_warning.setObjectName("banner")  # the banner's looks: warning, or louder error
        self.key_warning.setProperty("level", "warning")
        inside = QVBoxLayout(self.key_warning)
        inside.setContentsMargins(12, 8, 12, 8)
        self.key_text = plain_label()
        self.key_text.setAccessibleName("Project key not checked")
        inside.addWidget(self.key_text)
        self.trust_box = QCheckBox(wording.TRUST_KEY)
        self.trust_box.setToolTip(
            "Tick only after comparing the whole key with the one the organizers publish: "
            "joining trusts it from now on"
        )
        self.trust_box.toggled.connect(lambda _: self.trustChanged.emit())
        inside.addWidget(self.trust_box)
        self.key_warning.hide()
        return self.key_warning

    @property
    def preview(self) -> ProjectPreview | None:
        return self.card.preview

    def key_trusted(self) -> bool:
        """The project may be joined: its key was checked (the link's ``#key=``, or pinned when
        this computer joined it before), or the volunteer ticked "Trust this key"."""
        preview = self.card.preview
        if preview is None:
            return False
        return preview.key_source != "first-use" or self.trust_box.isChecked()

    def show_preview(self, preview: ProjectPreview) -> None:
        self.card.show_preview(preview)
        unchecked = preview.key_source == "first-use"
        if unchecked:
            level, text = wording.unchecked_key(preview.url, preview.project_key)
            self.key_warning.setProperty("level", level)
            self.key_warning.style().unpolish(self.key_warning)
            self.key_warning.style().polish(self.key_warning)
            self.key_text.setText(text)
        self.key_warning.setVisible(unchecked)
        # asked anew for each project looked up: a tick given to one key is not given to another
        self.trust_box.setChecked(False)
        self.trustChanged.emit()
        self.joining.setVisible(self.adding)
        # ticked anew for each project looked up: volunteers who add one expect to work for it
        self.instead_box.setChecked(True)
        self.offer_the_switch()

    def set_adding(self, adding: bool) -> None:
        self.adding = adding
        if not adding:
            self.joining.hide()
            self.instead_box.hide()

    def offer_the_switch(self) -> None:
        """Add project, another project active: the choice to contribute to the new one instead
        (the active project may change while the preview shows: detached from the command line)."""
        active = self._active_name()
        self.instead_box.setVisible(self.adding and active is not None)
        if active is not None:
            self.instead_box.setText(f"Contribute to it &instead of {active}")
        self._say_what_joining_does()

    def switch_chosen(self) -> bool:
        """Add project: the volunteer chose to contribute to the new project once joined."""
        return self.adding and not self.instead_box.isHidden() and self.instead_box.isChecked()

    def _say_what_joining_does(self) -> None:
        preview = self.card.preview
        if self.adding and preview is not None:
            instead = not self.instead_box.isHidden() and self.instead_box.isChecked()
            self.joining.setText(joining_note(preview.name, self._active_name(), instead=instead))

    def _active_name(self) -> str | None:
        return next((p.name for p in self.store.projects or [] if p.active), None)
