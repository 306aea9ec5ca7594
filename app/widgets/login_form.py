"""LoginForm: log in to (or sign up with) the active project's coordinator.

Used by the first-run wizard, the leaderboard page and the dashboard's "Log in" dialog. The password
goes to the engine once and is dropped from the field as soon as the engine answers; the engine keeps
a session in the OS keyring, never the password. Refusals (wrong password, name taken, too many
attempts) are shown under the form in the coordinator's own words.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.engine.store import EngineStore
from app.errors import explain
from core.api.errors import ApiError
from core.api.schema import AccountInfo


class LoginForm(QWidget):
    loggedIn = Signal(object)
    """AccountInfo, after a successful login or sign-up."""

    def __init__(self, store: EngineStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        self.intro = QLabel(wordWrap=True)
        box.addWidget(self.intro)
        form = QFormLayout()
        self.username = QLineEdit()
        self.username.setToolTip("Your name at this project (shown on its leaderboard)")
        self.username.setAccessibleName("Username")
        self.password = QLineEdit(echoMode=QLineEdit.EchoMode.Password)
        self.password.setToolTip(
            "Your password at this project; Barnraise keeps only a session in the system keyring"
        )
        self.password.setAccessibleName("Password")
        form.addRow("&Username", self.username)
        form.addRow("&Password", self.password)
        box.addLayout(form)
        row = QHBoxLayout()
        self.login_button = QPushButton("Log in", objectName="primary")
        self.login_button.setToolTip("Log in with this name and password")
        self.signup_button = QPushButton("Create account")
        self.signup_button.setToolTip("Create an account with this name and password, then log in")
        row.addWidget(self.login_button)
        row.addWidget(self.signup_button)
        row.addStretch(1)
        box.addLayout(row)
        self.message = QLabel(wordWrap=True, objectName="inlineError")
        self.message.hide()
        box.addWidget(self.message)
        self.login_button.clicked.connect(lambda: self._submit(signup=False))
        self.signup_button.clicked.connect(lambda: self._submit(signup=True))
        self.password.returnPressed.connect(lambda: self._submit(signup=False))
        self.username.returnPressed.connect(self.password.setFocus)
        store.accountChanged.connect(self.show_account)
        if store.account is not None:
            self.show_account(store.account)

    def show_account(self, account: AccountInfo) -> None:
        where = account.coordinator or "the project's coordinator"
        if account.allow_signup:
            self.intro.setText(
                f"Log in to {account.project or 'the project'} at {where}, or create an account "
                "there. Your contributions count towards your name on its leaderboard."
            )
        else:
            self.intro.setText(
                f"Log in to {account.project or 'the project'} at {where}. Accounts are made by "
                "the project's organizers: ask them for one."
            )
        self.signup_button.setVisible(account.allow_signup)
        if account.username and not self.username.text():
            self.username.setText(account.username)

    def _submit(self, *, signup: bool) -> None:
        name, password = self.username.text().strip(), self.password.text()
        if not name or not password:
            self._say("Enter a username and a password.")
            return
        self._busy(True)
        call = self.store.login(name, password, signup=signup)
        call.succeeded.connect(self._done)
        call.failed.connect(self._failed)
        call.finished.connect(lambda: self._busy(False))

    def _done(self, account: AccountInfo) -> None:
        self.password.clear()
        self.message.hide()
        self.loggedIn.emit(account)

    def _failed(self, error: ApiError) -> None:
        self.password.selectAll()
        self.password.setFocus()
        self._say(explain(error, "logging in"))

    def _say(self, text: str) -> None:
        self.message.setText(text)
        self.message.show()

    def _busy(self, busy: bool) -> None:
        for widget in (self.login_button, self.signup_button, self.username, self.password):
            widget.setEnabled(not busy)
        self.login_button.setText("Logging in…" if busy else "Log in")
