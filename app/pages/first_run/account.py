"""AccountStep: step 2, log in or sign up at the project's coordinator (or skip, with Next).

It appears when the joined project has a coordinator (accounts, the leaderboard); its intro says
whether the project takes contributions from its members only.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.engine.store import EngineStore
from app.widgets.login_form import LoginForm
from app.widgets.tiles import Card
from core.api.schema import AccountInfo


class AccountStep(QWidget):
    loggedIn = Signal()
    """Logged in, or signed up and logged in: the wizard moves on."""

    def __init__(self, store: EngineStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 8, 0, 0)
        self.intro = QLabel("", wordWrap=True)
        box.addWidget(self.intro)
        card = Card()
        self.login = LoginForm(store)
        card.box.addWidget(self.login)
        box.addWidget(card)
        box.addStretch(1)
        self.login.loggedIn.connect(lambda _: self.loggedIn.emit())
        store.accountChanged.connect(self._account_known)

    def _account_known(self, account: AccountInfo) -> None:
        if account.moderated:
            self.intro.setText(
                "This project accepts contributions from its members only: log in, or create an "
                "account if the project allows it. You can also skip this and log in later."
            )
        else:
            self.intro.setText(
                "Log in to have your contributions counted on the project's leaderboard, or skip "
                "this step."
            )
