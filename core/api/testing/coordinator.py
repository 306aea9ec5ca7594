"""FakeCoordinator: the demo project's coordinator as the fake engine reaches it.

Accounts (sign-up, wrong passwords), the leaderboard from the sample data, the credit check's
finding (counts that agree, or what a test sets), and a switch that makes it unreachable; the fake
engine decides who is logged in and what the API answers.
"""

from __future__ import annotations

from core.api.errors import CoordinatorUnreachable, LoginRefused
from core.api.schema import CreditCheck, Leaderboard, MyRank
from core.api.testing import sample_data

COORDINATOR_URL = "http://127.0.0.1:8765"


class FakeCoordinator:
    def __init__(self, username: str) -> None:
        self.passwords = {"alice": "correct horse battery", username: "my password"}
        self.allow_signup = True
        self.down = False
        """Unreachable: every call raises ``CoordinatorUnreachable``."""
        self.credit_answer: CreditCheck | None = None
        """What a credit check finds (``FakeEngine.set_credit``); None: counts that agree."""

    def reach(self) -> None:
        if self.down:
            raise CoordinatorUnreachable(f"the coordinator at {COORDINATOR_URL} does not answer")

    def login(self, username: str, password: str, *, signup: bool) -> None:
        """Accept the login (or the new account), or raise ``LoginRefused`` saying why not."""
        self.reach()
        if signup:
            if not self.allow_signup:
                raise LoginRefused("this project does not take sign-ups; ask its organizers")
            if username in self.passwords:
                raise LoginRefused(f"the name {username!r} is taken")
            self.passwords[username] = password
        elif self.passwords.get(username) != password:
            raise LoginRefused("wrong username or password")

    def board(self, project: str, you: str, now: float) -> tuple[Leaderboard, MyRank]:
        self.reach()
        return sample_data.leaderboard(project, you, 1_843_200, now)

    def credit(self, project: str) -> CreditCheck:
        self.reach()
        return self.credit_answer or sample_data.matching_credit(project)
