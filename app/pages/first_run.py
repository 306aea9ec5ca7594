"""First run: choose a project, log in or sign up, pick a preset — then the dashboard, still paused.

Step 1 lists what the engine offers: a local demo swarm running on this computer, projects already
attached; when it finds none it offers to start the local demo swarm. Any project can be joined
from its manifest file, or by its URL (BOINC's "Add project"): the engine looks it up — fetches its
signed manifest and checks the signature — and step 1 shows what it is and what it would use before
anything is joined; "Join" attaches it, pinning the project key the user saw. Step 2 appears when
the project has a coordinator (accounts, leaderboard).
Step 3 sets the scheduler preferences from a preset and asks, once, whether Barnraise starts in the
tray at login (on unless the user unticks it, as BOINC does). Nothing starts computing: contributing
is the dashboard's switch, as BOINC starts paused until the user opts in.

The same page adds a project later (the File menu's "Add project…", ``start_adding``): step 1 with a
Cancel, step 2 only when the joined project is the one the engine contributes to (the engine logs in
at that project's coordinator only), never step 3 (answered at the first run). The engine keeps one
project active: the preview of a project joined while another is active offers to contribute to the
new one instead (ticked, as a BOINC volunteer adding a project expects to work for it: the engine
switches after the attach, and step 2 follows for a moderated project), or to attach it beside the
active one, where it waits; the preview says which before anything is joined.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QHideEvent, QKeyEvent, QShowEvent
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.engine.store import EngineStore
from app.errors import explain, own_words
from app.presets import DEFAULT_PRESET, PRESETS, preset
from app.start_at_login import StartAtLogin
from app.widgets.login_form import LoginForm
from app.widgets.project_preview import ProjectPreviewCard, plain_label
from app.widgets.project_url import ProjectUrlField
from app.widgets.tiles import Card
from core.api.errors import ApiError, CoordinatorUnreachable
from core.api.schema import (
    AccountInfo,
    AttachRequest,
    ProjectInfo,
    ProjectOffer,
    ProjectPreview,
)

STEPS = ("Choose a project", "Your account", "How much to give")


TITLE = "Welcome to Barnraise"
INTRO = (
    "Barnraise lends your computer's idle time to a deep-learning model that many volunteers "
    "train together. Three steps, and nothing runs until you switch it on."
)
ADD_TITLE = "Add a project"
ADD_INTRO = (
    "Join another project by the address (or the manifest file) its organizers publish. Your "
    "preferences stay as they are."
)


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


class FirstRunPage(QWidget):
    finished = Signal()
    demoRequested = Signal()
    added = Signal(str)
    """Add mode: the project of this name was joined (and logged in to, or skipped)."""
    cancelled = Signal()
    """Add mode: the user went back from step 1; nothing was joined."""

    def __init__(
        self,
        store: EngineStore,
        *,
        can_start_demo: bool,
        start_at_login: StartAtLogin | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("page")
        self.store = store
        self.can_start_demo = can_start_demo
        self.start_at_login = start_at_login
        self.login_problem: str | None = None
        """Why the login item could not be set as asked at the end (the window says so)."""
        self.demo_starting = False
        self.working = False
        """A command of the wizard's own (joining, saving the preset) is in flight."""
        self.adding = False
        """Add mode: a project joined after the first run (``start_adding``)."""
        self.joined: ProjectInfo | None = None
        """Add mode: the project joined, once the engine answered."""
        # add mode: why the engine did not switch to the joined project (the window says so)
        self.switch_problem: str | None = None
        self._switching = False  # the Join under way is followed by a switch to the project
        outer = QVBoxLayout(self)
        outer.setContentsMargins(40, 28, 40, 24)
        self.title = QLabel(TITLE, objectName="pageTitle")
        outer.addWidget(self.title)
        self.intro = QLabel(INTRO, objectName="caption", wordWrap=True)
        outer.addWidget(self.intro)
        self.step_label = QLabel("", objectName="stateWord")
        outer.addWidget(self.step_label)
        self.steps = QStackedWidget()
        outer.addWidget(self.steps, 1)
        self.error = QLabel("", objectName="inlineError", wordWrap=True)
        self.error.setTextFormat(Qt.TextFormat.PlainText)  # may quote a project's own words
        self.error.hide()
        outer.addWidget(self.error)
        buttons = QHBoxLayout()
        self.back_button = QPushButton("&Back")
        self.back_button.setToolTip("Go back one step")
        self.next_button = QPushButton("&Next", objectName="primary")
        self.next_button.setToolTip("Go on to the next step")
        self.next_button.setDefault(True)
        buttons.addWidget(self.back_button)
        buttons.addStretch(1)
        buttons.addWidget(self.next_button)
        outer.addLayout(buttons)

        self.steps.addWidget(self._project_step())
        self.steps.addWidget(self._account_step())
        self.steps.addWidget(self._preset_step())
        self.back_button.clicked.connect(self._back)
        self.next_button.clicked.connect(self._next)
        store.offersChanged.connect(self.show_offers)
        store.accountChanged.connect(self._account_known)
        self._poll = QTimer(self, interval=2000)
        self._poll.timeout.connect(store.refresh_offers)
        self._go(0)

    # ---- step 1: the project ---------------------------------------------------------------------

    def _project_step(self) -> QWidget:
        """Two faces: the choice (offers, the demo, a file, a URL) and a looked-up project."""
        self.project_faces = QStackedWidget()
        self.project_faces.addWidget(self._choice_face())
        self.project_faces.addWidget(self._preview_face())
        return self.project_faces

    def _choice_face(self) -> QWidget:
        page = QWidget()
        box = QVBoxLayout(page)
        box.setContentsMargins(0, 8, 0, 0)
        box.addWidget(QLabel("Projects Barnraise found:"))
        self.offer_list = QListWidget()
        self.offer_list.setToolTip("The project your computer will help; pick one")
        self.offer_list.setAccessibleName("Projects")
        self.offer_list.setWordWrap(True)
        self.offer_list.itemDoubleClicked.connect(lambda _: self._next())
        self.offer_list.currentRowChanged.connect(lambda _: self._update_buttons())
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

    def _preview_face(self) -> QWidget:
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
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
        # add mode: what joining does to the project this computer contributes to now
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
        self.store.projectsChanged.connect(self._projects_known)
        self.preview_card = ProjectPreviewCard()
        box.addWidget(self.preview_card)
        box.addStretch(1)
        scroll.setWidget(holder)
        return scroll

    def previewing(self) -> ProjectPreview | None:
        """The looked-up project on screen, if step 1 shows one."""
        if self.steps.currentIndex() == 0 and self.project_faces.currentIndex() == 1:
            return self.preview_card.preview
        return None

    def _look_up(self, url: str) -> None:
        self.error.hide()
        self.url_field.set_busy(True)
        self.next_button.setEnabled(False)
        call = self.store.preview_project(url)
        call.succeeded.connect(self._show_preview)
        call.failed.connect(self._lookup_failed)
        call.finished.connect(lambda: self.url_field.set_busy(False))
        call.finished.connect(self._update_buttons)

    def _lookup_failed(self, error: ApiError) -> None:
        # the engine says which address did not answer, or what it served instead, and what to do
        if isinstance(error, CoordinatorUnreachable):
            self.url_field.show_problem(own_words(error))
        else:
            self.url_field.show_problem(explain(error, "looking up the project"))

    def _show_preview(self, preview: ProjectPreview) -> None:
        self.preview_card.show_preview(preview)
        self.joining.setVisible(self.adding)
        # ticked anew for each project looked up: volunteers who add one expect to work for it
        self.instead_box.setChecked(True)
        self._offer_the_switch()
        self._show_face(1)

    def _projects_known(self, _projects: object) -> None:
        # not while joining: the engine's own switch to the previewed project is no news here
        if self.previewing() is not None and not self.working:
            self._offer_the_switch()

    def _offer_the_switch(self) -> None:
        """Add mode, another project active: the choice to contribute to the new one instead (the
        active project may change while the preview shows: detached from the command line)."""
        active = self._active_name()
        self.instead_box.setVisible(self.adding and active is not None)
        if active is not None:
            self.instead_box.setText(f"Contribute to it &instead of {active}")
        self._say_what_joining_does()

    def _say_what_joining_does(self) -> None:
        preview = self.preview_card.preview
        if self.adding and preview is not None:
            instead = not self.instead_box.isHidden() and self.instead_box.isChecked()
            self.joining.setText(joining_note(preview.name, self._active_name(), instead=instead))

    def _show_face(self, face: int) -> None:
        self.error.hide()
        self.project_faces.setCurrentIndex(face)
        self.back_button.setVisible(face == 1)
        self._update_buttons()  # first: a disabled button cannot take the focus
        if face == 1:
            self.next_button.setFocus()
        else:
            self.url_field.edit.setFocus()

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
        self._update_buttons()

    def selected_offer(self) -> ProjectOffer | None:
        item = self.offer_list.currentItem()
        offer = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        return offer if isinstance(offer, ProjectOffer) else None

    def _start_demo(self) -> None:
        self.demo_starting = True
        self.demoRequested.emit()
        self._poll.start()
        self.show_offers(self.store.offers or [])

    def demo_failed(self, message: str) -> None:
        self.demo_starting = False
        self._say(f"The demo swarm did not start: {message}")
        self.show_offers(self.store.offers or [])

    def _open_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Open a project manifest", "", "Project manifests (*.toml);;All files (*)"
        )
        if path:
            self._attach(AttachRequest(manifest=path))

    # ---- step 2: the account ---------------------------------------------------------------------

    def _account_step(self) -> QWidget:
        page = QWidget()
        box = QVBoxLayout(page)
        box.setContentsMargins(0, 8, 0, 0)
        self.account_intro = QLabel("", wordWrap=True)
        box.addWidget(self.account_intro)
        card = Card()
        self.login = LoginForm(self.store)
        card.box.addWidget(self.login)
        box.addWidget(card)
        box.addStretch(1)
        self.login.loggedIn.connect(lambda _: self._account_done())
        return page

    def _account_known(self, account: AccountInfo) -> None:
        if account.moderated:
            self.account_intro.setText(
                "This project accepts contributions from its members only: log in, or create an "
                "account if the project allows it. You can also skip this and log in later."
            )
        else:
            self.account_intro.setText(
                "Log in to have your contributions counted on the project's leaderboard, or skip "
                "this step."
            )

    # ---- step 3: the preset ----------------------------------------------------------------------

    def _preset_step(self) -> QWidget:
        page = QWidget()
        box = QVBoxLayout(page)
        box.setContentsMargins(0, 8, 0, 0)
        box.addWidget(QLabel("How much of this computer may Barnraise use?", wordWrap=True))
        self.preset_buttons: dict[str, QRadioButton] = {}
        # each button sits in its own card, so Qt's automatic exclusivity (same parent) does not
        # apply: one group makes them a single choice
        self.preset_group = QButtonGroup(self)
        for p in PRESETS:
            card = Card()
            button = QRadioButton(p.title)
            button.setToolTip(p.summary)
            summary = QLabel(p.summary, objectName="help", wordWrap=True)
            card.box.addWidget(button)
            card.box.addWidget(summary)
            box.addWidget(card)
            self.preset_buttons[p.key] = button
            self.preset_group.addButton(button)
        self.preset_buttons[DEFAULT_PRESET].setChecked(True)
        self.login_box = QCheckBox("Start Barnraise in the tray when I log in")
        self.login_box.setToolTip(
            "Barnraise then follows your schedule from the moment you log in; change it any time "
            "in the Settings menu"
        )
        if self.start_at_login is not None:
            why_not = self.start_at_login.unavailable()
            self.login_box.setChecked(self.start_at_login.first_run_choice())
            self.login_box.setEnabled(why_not is None)
            if why_not is not None:
                self.login_box.setToolTip(f"Not possible here: {why_not}")
            box.addWidget(self.login_box)
        else:
            self.login_box.hide()
        box.addWidget(
            QLabel(
                "You can change every detail later on the Schedule page. Barnraise starts "
                "paused: turn on Contribute on the dashboard when you are ready.",
                objectName="caption",
                wordWrap=True,
            )
        )
        box.addStretch(1)
        return page

    def chosen_preset(self) -> str:
        return next(k for k, b in self.preset_buttons.items() if b.isChecked())

    # ---- moving between steps --------------------------------------------------------------------

    def keyPressEvent(self, event: QKeyEvent) -> None:
        """Enter goes on, as in a dialog (a page has no default button): from the project list or
        the preset choice — but on the account step Enter belongs to the login form (it logs in;
        skipping takes the button)."""
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        on_account_step = self.steps.currentIndex() == 1
        if event.key() == Qt.Key.Key_Escape and self.adding and self.back_button.isEnabled():
            self._back()  # back from the preview, or cancel the adding
            return
        # the URL field's Enter looks the project up (the line edit passes the key on)
        focus = self.focusWidget()
        in_url_field = focus is not None and self.url_field.isAncestorOf(focus)
        if enter and not on_account_step and not in_url_field and self.next_button.isEnabled():
            self._next()
            return
        super().keyPressEvent(event)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.store.refresh_offers()
        if self.steps.currentIndex() == 0:
            self._poll.start()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self._poll.stop()

    def _go(self, index: int) -> None:
        self.error.hide()
        self.project_faces.setCurrentIndex(0)
        self.steps.setCurrentIndex(index)
        if self.adding:  # no step 3 to count towards
            self.step_label.setText(STEPS[index])
        else:
            self.step_label.setText(f"Step {index + 1} of {len(STEPS)}: {STEPS[index]}")
        self.back_button.setVisible(index > 0)
        if index == 0:
            # nothing listed: the address is what the user came with
            (self.offer_list if self.offer_list.count() else self.url_field.edit).setFocus()
        elif index == 1:
            self.login.username.setFocus()
        else:
            self.preset_buttons[self.chosen_preset()].setFocus()
        self._update_buttons()

    def _update_buttons(self) -> None:
        index = self.steps.currentIndex()
        cancel = self.adding and index == 0 and self.project_faces.currentIndex() == 0
        self.back_button.setText("&Cancel" if cancel else "&Back")
        self.back_button.setToolTip(
            "Return to the dashboard without adding a project" if cancel else "Go back one step"
        )
        if cancel:
            self.back_button.setVisible(True)
        self.next_button.setText(("&Next", "&Skip for now", "&Finish")[index])
        if self.working:  # joining or saving: one at a time (the offers' poll calls this too)
            self.next_button.setEnabled(False)
            if self.previewing() is not None:
                self.next_button.setText("&Join")
        elif self.previewing() is not None:
            self.next_button.setText("&Join")
            self.next_button.setEnabled(True)
        elif index == 0:
            self.next_button.setEnabled(
                self.selected_offer() is not None and not self.url_field.busy
            )
        else:
            self.next_button.setEnabled(True)

    def _back(self) -> None:
        if self.previewing() is not None:
            self._show_face(0)
            return
        if self.adding and self.steps.currentIndex() == 0:
            self._end_adding()
            self.cancelled.emit()
            return
        index = self.steps.currentIndex()
        if index == 2 and not self._has_coordinator():
            index = 1
        self._go(max(0, index - 1))

    def _next(self) -> None:
        index = self.steps.currentIndex()
        preview = self.previewing()
        if preview is not None:
            switch = (
                self.adding and not self.instead_box.isHidden() and self.instead_box.isChecked()
            )
            # the key the user was shown: the engine refuses a manifest signed by any other
            request = AttachRequest(manifest=preview.url, pinned_key=preview.project_key)
            self._attach(request, switch=switch)
        elif index == 0:
            offer = self.selected_offer()
            if offer is None:
                return
            if offer.source == "attached":
                self._after_attach()
            else:
                self._attach(
                    AttachRequest(
                        manifest=offer.manifest,
                        initial_peers=list(offer.initial_peers),
                        data_base=offer.data_base,
                        local_swarm=offer.source == "local_swarm",
                    )
                )
        elif index == 1:
            self._account_done()
        else:
            self._finish()

    def _attach(self, request: AttachRequest, *, switch: bool = False) -> None:
        """``switch``: contribute to the project once joined, instead of the active one."""
        self._switching = switch
        self._busy(True)
        call = self.store.attach_request(request)
        call.succeeded.connect(self._attached)
        call.failed.connect(self._attach_failed)

    def _attach_failed(self, error: ApiError) -> None:
        self._busy(False)
        self._failed(error, "joining the project")

    def _attached(self, info: object) -> None:
        self.joined = info if isinstance(info, ProjectInfo) else None
        switching, self._switching = self._switching, False
        if switching and self.joined is not None and not self.joined.active:
            # still busy: Join stays off until the engine has switched
            call = self.store.activate_project(self.joined.name)
            call.succeeded.connect(self._activated)
            call.failed.connect(self._not_activated)
            call.finished.connect(lambda: self._busy(False))
            return
        self._busy(False)
        self._after_attach()

    def _activated(self, info: object) -> None:
        if isinstance(info, ProjectInfo):
            self.joined = info
        self._after_attach()

    def _not_activated(self, error: ApiError) -> None:
        # joined all the same, beside the active project: the window says why it did not switch
        self.switch_problem = explain(error, "switching to the joined project")
        self._after_attach()

    def _after_attach(self) -> None:
        call = self.store.refresh_account()
        call.finished.connect(self._account_or_preset)

    def _account_or_preset(self) -> None:
        if not self.adding:
            self._go(1 if self._has_coordinator() else 2)
        elif self.joined is not None and self.joined.active and self._has_coordinator():
            self._go(1)  # the account the engine holds is this project's: log in there now
        else:
            self._done_adding()

    def _account_done(self) -> None:
        if self.adding:
            self._done_adding()
        else:
            self._go(2)

    # ---- add mode --------------------------------------------------------------------------------

    def start_adding(self) -> None:
        """Show step 1 to join one more project (the first run's answers stay as they are)."""
        self.adding = True
        self.joined = None
        self.switch_problem = None
        self.title.setText(ADD_TITLE)
        self.intro.setText(ADD_INTRO)
        self.url_field.edit.clear()
        self.url_field.message.hide()
        self.show_offers(self.store.offers or [])
        self._go(0)

    def _end_adding(self) -> None:
        self.adding = False
        self.title.setText(TITLE)
        self.intro.setText(INTRO)
        self.joining.hide()
        self.instead_box.hide()
        self._go(0)

    def _done_adding(self) -> None:
        name = self.joined.name if self.joined is not None else ""
        self._end_adding()
        self.added.emit(name)

    def _active_name(self) -> str | None:
        return next((p.name for p in self.store.projects or [] if p.active), None)

    def _has_coordinator(self) -> bool:
        account = self.store.account
        return account is not None and account.coordinator is not None

    def _finish(self) -> None:
        if self.start_at_login is not None and self.login_box.isEnabled():
            self.login_problem = self.start_at_login.choose(self.login_box.isChecked())
        self._busy(True)
        call = self.store.change_settings(preset(self.chosen_preset()).values)
        call.succeeded.connect(lambda _: self.finished.emit())
        call.failed.connect(lambda error: self._failed(error, "setting the preferences"))
        call.finished.connect(lambda: self._busy(False))

    def _failed(self, error: ApiError, doing: str) -> None:
        self._say(explain(error, doing))

    def _say(self, text: str) -> None:
        self.error.setText(text)
        self.error.show()

    def _busy(self, busy: bool) -> None:
        self.working = busy
        self.next_button.setEnabled(not busy)
        self.back_button.setEnabled(not busy)
        if not busy:
            self._update_buttons()
