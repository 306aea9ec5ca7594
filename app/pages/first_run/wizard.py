"""FirstRunPage: the steps composed, Back and Next, and the flow that says which step follows.

The page shows one step at a time (``project``, ``account``, ``preset``) under its title and a
line naming the step, with one error line and the Back / Next buttons below; what Next does
depends on the step (join the project chosen or looked up, skip the login, save the preset).
The first run ends with the preset saved (``finished``): the window shows the dashboard, still
paused. ``start_adding`` opens the same page for one more project (``flows.ADD_PROJECT``), which
ends with ``added`` or ``cancelled``.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QHideEvent, QKeyEvent, QShowEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QStackedWidget, QVBoxLayout, QWidget

from app.engine.store import EngineStore
from app.errors import explain
from app.pages.first_run.account import AccountStep
from app.pages.first_run.flows import ACCOUNT, ADD_PROJECT, FIRST_RUN, PRESET, PROJECT, Flow
from app.pages.first_run.joining import Joiner
from app.pages.first_run.preset import PresetStep
from app.pages.first_run.project import CHOICE, PREVIEW, ProjectStep, offer_request
from app.presets import preset
from app.start_at_login import StartAtLogin
from core.api.errors import ApiError
from core.api.schema import AttachRequest, ProjectInfo, ProjectOffer, ProjectPreview


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
        self.flow: Flow = FIRST_RUN
        self.login_problem: str | None = None
        """Why the login item could not be set as asked at the end (the window says so)."""
        self.working = False
        """A command of the wizard's own (joining, saving the preset) is in flight."""
        self._lay_out()
        self.project = ProjectStep(store, can_start_demo=can_start_demo)
        self.account = AccountStep(store)
        self.preset = PresetStep(start_at_login)
        for step in (self.project, self.account, self.preset):  # in the order of ``flows.STEPS``
            self.steps.addWidget(step)
        self.joiner = Joiner(store, self)

        # the steps' controls, by the names the window, its tests and the screenshots use
        self.offer_list = self.project.offer_list
        self.no_offers = self.project.no_offers
        self.demo_button = self.project.demo_button
        self.url_field = self.project.url_field
        self.preview_card = self.project.preview.card
        self.joining = self.project.preview.joining
        self.instead_box = self.project.preview.instead_box
        self.trust_box = self.project.preview.trust_box
        self.login = self.account.login
        self.preset_buttons = self.preset.buttons
        self.login_box = self.preset.login_box

        self._connect()
        self._go(PROJECT)

    def _lay_out(self) -> None:
        """The title, the step's name, the steps, the error line, Back and Next."""
        outer = QVBoxLayout(self)
        outer.setContentsMargins(40, 28, 40, 24)
        self.title = QLabel(FIRST_RUN.title, objectName="pageTitle")
        outer.addWidget(self.title)
        self.intro = QLabel(FIRST_RUN.intro, objectName="caption", wordWrap=True)
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

    def _connect(self) -> None:
        self.project.offerActivated.connect(self._next)
        self.project.fileChosen.connect(
            lambda path: self.joiner.attach(AttachRequest(manifest=path))
        )
        self.project.demoRequested.connect(self.demoRequested)
        self.project.lookingUp.connect(self._looking_up)
        self.project.faceShown.connect(self._face_shown)
        self.project.changed.connect(self._update_buttons)
        self.project.preview.trustChanged.connect(self._update_buttons)
        self.account.loggedIn.connect(self._account_done)
        self.joiner.busyChanged.connect(self._busy)
        self.joiner.failed.connect(lambda error: self._failed(error, "joining the project"))
        self.joiner.done.connect(self._joined)
        self.back_button.clicked.connect(self._back)
        self.next_button.clicked.connect(self._next)
        # not while joining: the engine's own switch to the previewed project is no news here
        self.store.projectsChanged.connect(lambda _: self._projects_known())

    # ---- what the window and the tests read ------------------------------------------------------

    @property
    def adding(self) -> bool:
        """Add mode: a project joined after the first run (``start_adding``)."""
        return self.flow.adding

    @property
    def joined(self) -> ProjectInfo | None:
        """Add mode: the project joined, once the engine answered."""
        return self.joiner.joined

    @property
    def switch_problem(self) -> str | None:
        """Add mode: why the engine did not switch to the joined project (the window says so)."""
        return self.joiner.switch_problem

    def previewing(self) -> ProjectPreview | None:
        """The looked-up project on screen, if step 1 shows one."""
        return self.project.previewing() if self.steps.currentIndex() == PROJECT else None

    def selected_offer(self) -> ProjectOffer | None:
        return self.project.selected_offer()

    def chosen_preset(self) -> str:
        return self.preset.chosen()

    def demo_failed(self, message: str) -> None:
        self._say(f"The demo swarm did not start: {message}")
        self.project.demo_failed()

    # ---- add mode --------------------------------------------------------------------------------

    def start_adding(self) -> None:
        """Show step 1 to join one more project (the first run's answers stay as they are)."""
        self.joiner.forget()
        self._set_flow(ADD_PROJECT)

    def _end_adding(self) -> None:
        self._set_flow(FIRST_RUN)

    def _done_adding(self) -> None:
        joined = self.joiner.joined
        self._end_adding()
        self.added.emit(joined.name if joined is not None else "")

    def _set_flow(self, flow: Flow) -> None:
        self.flow = flow
        self.title.setText(flow.title)
        self.intro.setText(flow.intro)
        self.project.set_adding(flow.adding)
        self._go(PROJECT)

    # ---- moving between steps --------------------------------------------------------------------

    def keyPressEvent(self, event: QKeyEvent) -> None:
        """Enter goes on, as in a dialog (a page has no default button): from the project list or
        the preset choice — but on the account step Enter belongs to the login form (it logs in;
        skipping takes the button)."""
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        on_account_step = self.steps.currentIndex() == ACCOUNT
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
        if self.steps.currentIndex() == PROJECT:
            self.project.keep_asking()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.project.stop_asking()

    def _go(self, step: int) -> None:
        self.error.hide()
        self.project.setCurrentIndex(CHOICE)
        self.steps.setCurrentIndex(step)
        self.step_label.setText(self.flow.label(step))
        self.back_button.setVisible(step > PROJECT)
        if step == PROJECT:
            # nothing listed: the address is what the user came with
            (self.offer_list if self.offer_list.count() else self.url_field.edit).setFocus()
        elif step == ACCOUNT:
            self.login.username.setFocus()
        else:
            self.preset.focus_choice()
        self._update_buttons()

    def _face_shown(self, face: int) -> None:
        self.error.hide()
        self.back_button.setVisible(face == PREVIEW)
        self._update_buttons()  # first: a disabled button cannot take the focus
        if face == PREVIEW:
            # a key nobody checked: the box that trusts it first (Join is off until it is ticked)
            trusted = self.project.preview.key_trusted()
            (self.next_button if trusted else self.trust_box).setFocus()
        else:
            self.url_field.edit.setFocus()

    def _update_buttons(self) -> None:
        step = self.steps.currentIndex()
        cancel = self.adding and step == PROJECT and self.project.currentIndex() == CHOICE
        self.back_button.setText("&Cancel" if cancel else "&Back")
        self.back_button.setToolTip(
            "Return to the dashboard without adding a project" if cancel else "Go back one step"
        )
        if cancel:
            self.back_button.setVisible(True)
        self.next_button.setText(("&Next", "&Skip for now", "&Finish")[step])
        if self.working:  # joining or saving: one at a time (the offers' poll calls this too)
            self.next_button.setEnabled(False)
            if self.previewing() is not None:
                self.next_button.setText("&Join")
        elif self.previewing() is not None:
            self.next_button.setText("&Join")
            # a key nobody checked is trusted only by the volunteer's explicit tick
            self.next_button.setEnabled(self.project.preview.key_trusted())
        elif step == PROJECT:
            self.next_button.setEnabled(self.project.ready())
        else:
            self.next_button.setEnabled(True)

    def _back(self) -> None:
        if self.previewing() is not None:
            self.project.show_face(CHOICE)
            return
        step = self.steps.currentIndex()
        if self.adding and step == PROJECT:
            self._end_adding()
            self.cancelled.emit()
            return
        if step == PRESET and not self._has_coordinator():
            step = ACCOUNT  # back over the account step that was skipped
        self._go(max(PROJECT, step - 1))

    def _next(self) -> None:
        step = self.steps.currentIndex()
        preview = self.previewing()
        if preview is not None:
            if not self.project.preview.key_trusted():
                self._say(
                    "Tick “Trust this key” once you have checked the project key, or go back."
                )
                return
            # the key the user was shown: the engine refuses a manifest signed by any other
            request = AttachRequest(manifest=preview.url, pinned_key=preview.project_key)
            self.joiner.attach(request, switch=self.project.preview.switch_chosen())
        elif step == PROJECT:
            offer = self.selected_offer()
            if offer is None:
                return
            if offer.source == "attached":
                self.joiner.refresh_account()
            else:
                self.joiner.attach(offer_request(offer))
        elif step == ACCOUNT:
            self._account_done()
        else:
            self._finish()

    def _joined(self) -> None:
        self._then(self.flow.after_joining(self.joiner.joined, self._has_coordinator()))

    def _account_done(self) -> None:
        self._then(self.flow.after_account())

    def _then(self, step: int | None) -> None:
        """Go to ``step``; None: the flow is done (only Add project ends so: the first run ends
        with the preset saved)."""
        if step is not None:
            self._go(step)
        else:
            self._done_adding()

    def _projects_known(self) -> None:
        if self.previewing() is not None and not self.working:
            self.project.preview.offer_the_switch()

    def _has_coordinator(self) -> bool:
        account = self.store.account
        return account is not None and account.coordinator is not None

    def _finish(self) -> None:
        self.login_problem = self.preset.apply_login_choice()
        self._busy(True)
        call = self.store.change_settings(preset(self.preset.chosen()).values)
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

    def _looking_up(self) -> None:
        self.error.hide()
        self.next_button.setEnabled(False)
