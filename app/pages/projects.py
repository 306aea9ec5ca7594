"""Projects: every attached project, the one this computer contributes to marked, each with its own
figures; switch to another one, or leave one.

One card per attached project, in the engine's order: its name and description (the organizers'
words: plain text, never markup), whether it is the active project, its kind and whether it needs
an account (what its manifest says, from the engine's offers), where it was joined from, and what
this computer contributed to it (its own rows of the ledger, read while the page shows). "Contribute
to this project" makes it the active one (the engine stops the active peer first, its contribution
counted); "Leave project…" asks first, saying what is kept and what is lost. One command at a time:
while one is in flight every action waits. A failure goes to the window's banner in the engine's
words (``problem``); the list always shows what the engine says.
"""

from __future__ import annotations

import itertools

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractButton,
    QApplication,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app import wording
from app.engine.bridge import PendingCall
from app.engine.store import EngineStore
from app.errors import explain
from app.widgets.project_preview import plain_label
from app.widgets.tiles import Card
from core.api.errors import ApiError
from core.api.schema import AccountInfo, ProjectInfo, ProjectOffer, Statistics

ROWS = ("Kind", "Joined from", "Account", "Contributed")


class ProjectCard(Card):
    """One attached project: what it is, and its two actions."""

    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self.setAccessibleName(name)
        top = QHBoxLayout()
        titles = QVBoxLayout()
        self.title = plain_label("stateWord")
        self.title.setText(name)
        self.marker = plain_label("caption")
        titles.addWidget(self.title)
        titles.addWidget(self.marker)
        top.addLayout(titles, 1)
        self.switch_button = QPushButton("Contribute to this project", objectName="primary")
        self.switch_button.setAccessibleName(f"Contribute to {name}")
        self.leave_button = QPushButton("Leave project…")
        self.leave_button.setAccessibleName(f"Leave {name}…")
        self.leave_button.setToolTip(f"Remove {name} from your projects (asks first)")
        for button in (self.switch_button, self.leave_button):
            top.addWidget(button, 0, Qt.AlignmentFlag.AlignTop)
        self.box.addLayout(top)
        self.description = plain_label()
        self.description.setAccessibleName("Project description")
        self.box.addWidget(self.description)
        # a grid, as the preview's: wrapped labels in a QFormLayout get spare lines around them
        grid = QGridLayout()
        grid.setHorizontalSpacing(14)
        grid.setVerticalSpacing(4)
        grid.setColumnStretch(1, 1)
        self.values: dict[str, QLabel] = {}
        for row, title in enumerate(ROWS):
            heading = QLabel(title, objectName="help")
            value = plain_label()
            value.setAccessibleName(title)
            self.values[title] = value
            grid.addWidget(heading, row, 0, Qt.AlignmentFlag.AlignTop)
            grid.addWidget(value, row, 1)
        self.box.addLayout(grid)
        self.update_refused = plain_label("inlineError")
        self.update_refused.hide()
        self.box.addWidget(self.update_refused)

    def show_project(
        self,
        project: ProjectInfo,
        *,
        active: str | None,
        offer: ProjectOffer | None,
        account: AccountInfo | None,
        figures: Statistics | None,
    ) -> None:
        self.description.setText(project.description or "The project gives no description.")
        self.marker.setText(
            "Active: the project this computer contributes to"
            if project.active
            else "Attached: waits while another project is active"
        )
        self.setAccessibleName(f"{project.name}, active" if project.active else project.name)
        self.switch_button.setVisible(not project.active)
        self.switch_button.setToolTip(wording.switch_tip(project.name, active))
        kind = offer.kind if offer is not None else None
        self.values["Kind"].setText(wording.project_kind_name(kind) if kind else "–")
        self.values["Kind"].setToolTip(wording.project_kind(kind) if kind else "")
        self.values["Joined from"].setText(wording.project_origin(project))
        # the account the engine holds is the active project's, once it has followed a switch
        held = account if account is not None and account.project == project.name else None
        self.values["Account"].setText(
            wording.project_account(offer.moderated, active=project.active, account=held)
            if offer is not None
            else "–"
        )
        self.values["Contributed"].setText(wording.project_figures(figures))
        refused = project.update_refused
        self.update_refused.setText(wording.update_refused_line(refused) if refused else "")
        self.update_refused.setVisible(bool(refused))

    def buttons(self) -> list[QPushButton]:
        """Its actions, in the order Tab visits them (the hidden switch of the active one too)."""
        return [self.switch_button, self.leave_button]


class ProjectsPage(QWidget):
    problem = Signal(str)
    """A command failed: one sentence, in the engine's words (the window's banner shows it)."""
    addRequested = Signal()
    """"Join another project…": the window's File > Add project…."""

    def __init__(self, store: EngineStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("page")
        self.store = store
        self.cards: dict[str, ProjectCard] = {}
        self.working: str | None = None
        """What the command in flight does ("Switching to …"), or None."""
        self.question: QMessageBox | None = None
        """The leave question while it is open."""
        outer = QVBoxLayout(self)
        outer.setContentsMargins(24, 20, 24, 20)
        top = QHBoxLayout()
        top.addWidget(QLabel("Projects", objectName="pageTitle"), 1)
        self.add_button = QPushButton("Join another project…")
        self.add_button.setToolTip("Join one more project by its address or its manifest file")
        top.addWidget(self.add_button)
        outer.addLayout(top)
        outer.addWidget(
            QLabel(
                "Every project this computer joined. It contributes to one at a time, the active "
                "one; what each counted stays counted when you switch.",
                objectName="caption",
                wordWrap=True,
            )
        )
        self.status = QLabel("", objectName="caption")
        self.status.hide()
        outer.addWidget(self.status)
        scroll = QScrollArea(widgetResizable=True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        body = QWidget()
        body.setObjectName("page")
        self.list = QVBoxLayout(body)
        self.list.setContentsMargins(0, 0, 8, 0)
        self.list.setSpacing(10)
        self.list.addStretch(1)
        scroll.setWidget(body)
        outer.addWidget(scroll, 1)

        self.add_button.clicked.connect(self.addRequested)
        store.projectsChanged.connect(self._refresh)
        store.projectFiguresChanged.connect(self._refresh)
        store.offersChanged.connect(self._refresh)
        store.accountChanged.connect(self._refresh)
        store.connectionChanged.connect(self._refresh)
        self.show_projects()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.store.watch_projects(True)

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.store.watch_projects(False)

    # ---- showing -----------------------------------------------------------------------------------

    def _refresh(self, *_: object) -> None:
        self.show_projects()

    def show_projects(self) -> None:
        """The cards as the store knows the projects: new ones added, left ones removed, each
        one's facts and figures brought up to date, in the engine's order."""
        store = self.store
        projects = store.projects or []
        offers = {o.name: o for o in store.offers or [] if o.source == "attached"}
        active = next((p.name for p in projects if p.active), None)
        names = [p.name for p in projects]
        gone = [name for name in self.cards if name not in names]
        focus = QApplication.focusWidget()
        focus_lost = focus is not None and any(self.cards[n].isAncestorOf(focus) for n in gone)
        for name in gone:
            card = self.cards.pop(name)
            self.list.removeWidget(card)
            card.hide()
            card.deleteLater()
        for card in self.cards.values():  # put back below in the engine's order
            self.list.removeWidget(card)
        for index, project in enumerate(projects):
            card = self._card(project.name)
            self.list.insertWidget(index, card)
            card.show_project(
                project,
                active=active,
                offer=offers.get(project.name),
                account=store.account,
                figures=store.project_figures.get(project.name),
            )
        self._order_tabs()
        self._enable()
        if focus_lost:  # the card that had it is gone: the next control takes it, not nothing
            self._first_button().setFocus(Qt.FocusReason.OtherFocusReason)

    def _card(self, name: str) -> ProjectCard:
        """The card of ``name``, made the first time."""
        card = self.cards.get(name)
        if card is None:
            card = self.cards[name] = ProjectCard(name)
            card.switch_button.clicked.connect(lambda: self.contribute_to(name))
            card.leave_button.clicked.connect(lambda: self.ask_leave(name))
        return card

    def _order_tabs(self) -> None:
        """Tab follows the cards as shown (they are made in the order the projects came)."""
        chain: list[QWidget] = [self.add_button]
        for name in [p.name for p in self.store.projects or []]:
            chain += self.cards[name].buttons()
        for before, after in itertools.pairwise(chain):
            QWidget.setTabOrder(before, after)

    def _first_button(self) -> QAbstractButton:
        for project in self.store.projects or []:
            for button in self.cards[project.name].buttons():
                if button.isVisible() and button.isEnabled():
                    return button
        return self.add_button

    def _enable(self) -> None:
        idle = self.working is None and self.store.connected
        for card in self.cards.values():
            for button in card.buttons():
                button.setEnabled(idle)
        self.status.setText(self.working or "")
        self.status.setVisible(self.working is not None)

    # ---- acting ------------------------------------------------------------------------------------

    def contribute_to(self, name: str) -> None:
        """Make ``name`` the active project; the list marks it once the engine has switched."""
        if self.working is not None:
            return
        call = self.store.activate_project(name)
        self._busy(f"Switching to {name}…", call, f"switching to {name}")
        # the answer may come before the engine's news of it: read the list, then idle
        call.succeeded.connect(lambda _: self._then_read_projects())

    def ask_leave(self, name: str) -> None:
        """Ask whether to leave ``name`` (not modal to the whole app: the window stays live)."""
        if self.working is not None or self.question is not None:
            return
        projects = self.store.projects or []
        active = next((p.name for p in projects if p.active), None)
        others = [p.name for p in projects if p.name != name]
        question, details = wording.leave_question(
            name, active=active, next_active=others[0] if others else None
        )
        box = QMessageBox(self)
        box.setWindowTitle("Leave project")
        box.setIcon(QMessageBox.Icon.Question)
        box.setTextFormat(Qt.TextFormat.PlainText)  # a project's name is its organizers' words
        box.setText(question)
        box.setInformativeText(details)
        leave = box.addButton(f"Leave {name}", QMessageBox.ButtonRole.DestructiveRole)
        leave.setToolTip(f"Remove {name} from your projects")
        cancel = box.addButton(QMessageBox.StandardButton.Cancel)
        cancel.setToolTip(f"Keep {name}")
        box.setDefaultButton(cancel)  # leaving is the one that cannot be undone by a click
        box.setEscapeButton(cancel)
        box.finished.connect(lambda _: self._answered(box, leave, name))
        self.question = box
        box.open()

    def _answered(self, box: QMessageBox, leave: QAbstractButton, name: str) -> None:
        self.question = None
        chosen = box.clickedButton() is leave
        box.deleteLater()
        if chosen:
            self.leave(name)

    def leave(self, name: str) -> None:
        """Detach ``name`` (asked already); its card goes once the engine answers."""
        if self.working is not None:
            return
        call = self.store.detach_project(name)
        self._busy(f"Leaving {name}…", call, f"leaving {name}")
        call.succeeded.connect(lambda _: self._idle())  # the store has the list left already

    def _busy(self, text: str, call: PendingCall, doing: str) -> None:
        self.working = text
        self._enable()
        call.failed.connect(lambda error: self._failed(error, doing))

    def _then_read_projects(self) -> None:
        self.store.refresh_projects().finished.connect(self._idle)

    def _failed(self, error: ApiError, doing: str) -> None:
        self._idle()
        self.problem.emit(explain(error, doing))

    def _idle(self) -> None:
        self.working = None
        self.show_projects()
