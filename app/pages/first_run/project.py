"""ProjectStep: step 1, the project; two faces, the choice and a looked-up project (``preview``).

The choice lists what the engine offers: a local demo swarm running on this computer, projects
already attached; when it finds none it offers to start the local demo swarm, and asks again every
two seconds until one shows up. Any project can be joined from its manifest file, or by its URL
(BOINC's "Add project"): the engine looks it up (fetches its signed manifest and checks the
signature) and the preview face shows what it is and what it would use before anything is joined.
In Add project, what is attached already is not offered again.

The step chooses; the wizard joins (``Joining``) and moves on.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.engine.store import EngineStore
from app.errors import explain, own_words
from app.pages.first_run.preview import PreviewFace
from app.widgets.project_url import ProjectUrlField
from core.api.errors import ApiError, CoordinatorUnreachable
from core.api.schema import AttachRequest, ProjectOffer, ProjectPreview

CHOICE, PREVIEW = 0, 1
"""The step's faces."""
OFFERS_POLL_MS = 2000
"""How often the engine is asked for offers while it has none to show."""


def offer_request(offer: ProjectOffer) -> AttachRequest:
    """What joining ``offer`` asks of the engine."""
    return AttachRequest(
        manifest=offer.manifest,
        initial_peers=list(offer.initial_peers),
        data_base=offer.data_base,
        local_swarm=offer.source == "local_swarm",
    )


class ProjectStep(QStackedWidget):
    offerActivated = Signal()
    """An offer was double-clicked: join it (as Next does)."""
    fileChosen = Signal(str)
    """The path of a project manifest to join."""
    demoRequested = Signal()
    lookingUp = Signal()
    """A project URL is being looked up: Next waits."""
    faceShown = Signal(int)
    """The choice (``CHOICE``) or a looked-up project (``PREVIEW``) is shown now."""
    changed = Signal()
    """What Next may do changed (the offers, the chosen one, a look-up ended)."""

    def __init__(
        self, store: EngineStore, *, can_start_demo: bool, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.store = store
        self.can_start_demo = can_start_demo
        self.adding = False
        """Add project: what is attached already is not offered."""
        self.demo_starting = False
        self.addWidget(self._choice_face())
        self.preview = PreviewFace(store)
        self.addWidget(self.preview)
        store.offersChanged.connect(self.show_offers)
        self._poll = QTimer(self, interval=OFFERS_POLL_MS)
        self._poll.timeout.connect(store.refresh_offers)

    def _choice_face(self) -> QWidget:
        page = QWidget()
        box = QVBoxLayout(page)
        box.setContentsMargins(0, 8, 0, 0)
        box.addWidget(QLabel("Projects Barnraise found:"))
        self.offer_list = QListWidget()
        self.offer_list.setToolTip("The project your computer will help; pick one")
        self.offer_list.setAccessibleName("Projects")
        self.offer_list.setWordWrap(True)
        self.offer_list.itemDoubleClicked.connect(lambda _: self.offerActivated.emit())
        self.offer_list.currentRowChanged.connect(lambda _: self.changed.emit())
        box.addWidget(self.offer_list, 1)
        self.no_offers = QLabel("", wordWrap=True)
        box.addWidget(self.no_offers)
        row = QHBoxLayout()
        self.demo_button = QPushButton("Start the local &demo swarm")
        self.demo_button.setToolTip(
            "Run a small demo collaboration on this computer (two trainers and a backbone) and "
            "join it: a safe way to see Barnraise work"
        )
        self.file_button = QPushButton("Open a project &file…")
        self.file_button.setToolTip(
            "Join a project from the manifest (.toml) its organizers publish"
        )
        row.addWidget(self.demo_button)
        row.addWidget(self.file_button)
        row.addStretch(1)
        box.addLayout(row)
        box.addSpacing(10)
        box.addWidget(
            QLabel("Or join a project by its address, as its organizers publish it:", wordWrap=True)
        )
        self.url_field = ProjectUrlField()
        box.addWidget(self.url_field)
        self.demo_button.clicked.connect(self._start_demo)
        self.file_button.clicked.connect(self._open_file)
        self.url_field.lookupRequested.connect(self._look_up)
        return page

    # ---- the offers ------------------------------------------------------------------------------

    def show_offers(self, offers: list[ProjectOffer]) -> None:
        if self.adding:  # what is attached already cannot be added
            offers = [o for o in offers if o.source != "attached"]
        chosen = self.selected_offer()
        self.offer_list.clear()
        for offer in offers:
            item = QListWidgetItem(f"{offer.name}\n{offer.note or offer.description}")
            item.setData(Qt.ItemDataRole.UserRole, offer)
            item.setToolTip(offer.description)
            self.offer_list.addItem(item)
            if chosen is not None and offer.manifest == chosen.manifest:
                self.offer_list.setCurrentItem(item)
        if self.offer_list.currentRow() < 0 and offers:
            self.offer_list.setCurrentRow(0)
        # a demo swarm already attached is offered as "attached": it runs all the same
        attached_demo = any(p.local_swarm for p in self.store.projects or [])
        local = attached_demo or any(o.source == "local_swarm" for o in offers)
        self.demo_button.setVisible(self.can_start_demo and not local)
        self.demo_button.setEnabled(not self.demo_starting)
        if offers:
            self.no_offers.setText("")
            self._poll.stop()
        elif self.demo_starting:
            self.no_offers.setText(
                "Starting the local demo swarm… The first start writes its data and trains a "
                "tokenizer, which takes a minute or two."
            )
        elif self.adding:
            self.no_offers.setText(
                "No other project found on this computer: join one by the address (or the "
                "manifest file) its organizers publish."
            )
        else:
            self.no_offers.setText(
                "No project found on this computer. Start the local demo swarm to try Barnraise, "
                "or join a project by the address (or the manifest file) its organizers publish."
            )
        self.changed.emit()

    def selected_offer(self) -> ProjectOffer | None:
        item = self.offer_list.currentItem()
        offer = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        return offer if isinstance(offer, ProjectOffer) else None

    def ready(self) -> bool:
        """An offer is chosen, and no look-up is under way: Next may join it."""
        return self.selected_offer() is not None and not self.url_field.busy

    def keep_asking(self) -> None:
        """Ask the engine for offers every two seconds, until it has some."""
        self._poll.start()

    def stop_asking(self) -> None:
        self._poll.stop()

    def set_adding(self, adding: bool) -> None:
        self.adding = adding
        self.preview.set_adding(adding)
        if adding:
            self.url_field.edit.clear()
            self.url_field.message.hide()
            self.show_offers(self.store.offers or [])

    def _start_demo(self) -> None:
        self.demo_starting = True
        self.demoRequested.emit()
        self._poll.start()
        self.show_offers(self.store.offers or [])

    def demo_failed(self) -> None:
        self.demo_starting = False
        self.show_offers(self.store.offers or [])

    def _open_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Open a project manifest", "", "Project manifests (*.toml);;All files (*)"
        )
        if path:
            self.fileChosen.emit(path)

    # ---- a project looked up by its URL ----------------------------------------------------------

    def previewing(self) -> ProjectPreview | None:
        """The looked-up project, if this step shows one."""
        return self.preview.preview if self.currentIndex() == PREVIEW else None

    def show_face(self, face: int) -> None:
        self.setCurrentIndex(face)
        self.faceShown.emit(face)

    def _look_up(self, url: str) -> None:
        self.url_field.set_busy(True)
        self.lookingUp.emit()
        call = self.store.preview_project(url)
        call.succeeded.connect(self._show_preview)
        call.failed.connect(self._lookup_failed)
        call.finished.connect(lambda: self.url_field.set_busy(False))
        call.finished.connect(self.changed)

    def _lookup_failed(self, error: ApiError) -> None:
        # the engine says which address did not answer, or what it served instead, and what to do
        if isinstance(error, CoordinatorUnreachable):
            self.url_field.show_problem(own_words(error))
        else:
            self.url_field.show_problem(explain(error, "looking up the project"))

    def _show_preview(self, preview: ProjectPreview) -> None:
        self.preview.show_preview(preview)
        self.show_face(PREVIEW)
