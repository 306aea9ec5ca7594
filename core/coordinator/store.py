"""CoordinatorStore: the one SQLite connection and the tables' helpers that share it.

The service owns one store and uses it only from its event loop's thread (SQLite's same-thread
check stays on to catch any other use). Its statements are short, indexed and local, well under a
millisecond each, so they run right on the loop: handing each one to a thread would cost more than
it saves and would need a lock around the connection. The one slow step of an account, the scrypt
hash, runs on a worker thread without touching the database.

The management commands (and ``barnraise swarm --moderated``) open their own store on the same
file: WAL lets them write while a service runs, and the service reads users afresh on every
request, so a ban applies at once.

Opening the store also gives names stored before schema 2 their look-alike skeleton (``schema``).
"""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType

from core.coordinator.manifest_versions import ManifestVersions
from core.coordinator.people.accounts import Accounts, User
from core.coordinator.people.confusables import Confusables
from core.coordinator.people.names import Password, Username
from core.coordinator.people.passwords import DEFAULT_PARAMS, ScryptParams, hash_password
from core.coordinator.people.peer_keys import PeerKeys
from core.coordinator.people.sessions import Sessions
from core.coordinator.reports.evaluations import Evaluations
from core.coordinator.reports.evidence_records import EvidenceRecords
from core.coordinator.reports.figures import Figures
from core.coordinator.reports.leaderboard import Leaderboard
from core.coordinator.reports.peer_credit import PeerCredits
from core.coordinator.reports.receipts import Receipts
from core.coordinator.reports.records import Contributions, Passes
from core.coordinator.reports.rollback import RollbackOrders
from core.coordinator.schema import open_database, transaction


class CoordinatorStore:
    def __init__(self, path: Path, confusables: Confusables | None = None) -> None:
        self.path = path
        self._conn = open_database(path)
        try:
            self.accounts = Accounts(self._conn, confusables or Confusables.load())
            self.accounts.fill_skeletons()
        except BaseException:
            self._conn.close()
            raise
        self.peer_keys = PeerKeys(self._conn)
        self.sessions = Sessions(self._conn)
        self.passes = Passes(self._conn)
        self.contributions = Contributions(self._conn)
        self.figures = Figures(self._conn)
        self.evaluations = Evaluations(self._conn)
        self.leaderboard = Leaderboard(self._conn, self.contributions, self.passes)
        self.peer_credit = PeerCredits(self._conn)
        self.evidence = EvidenceRecords(self._conn)
        self.receipts = Receipts(self._conn)
        self.rollbacks = RollbackOrders(self._conn)
        self.manifests = ManifestVersions(self._conn)

    def add_user(
        self,
        name: str,
        password: str | Password | None = None,
        *,
        moderator: bool = False,
        params: ScryptParams = DEFAULT_PARAMS,
        now: float | None = None,
    ) -> User:
        """Allowlist ``name`` (creating it if new); with a ``password`` the account is ready to log
        in, without one it is an invitation to sign up. ``BadRequest`` for a bad name or password.
        Synchronous: for set-up code and the management commands, not for the event loop."""
        username = Username.parse(name)
        if password is not None and not isinstance(password, Password):
            password = Password.parse(password)
        hashed = None if password is None else hash_password(password, params)
        when = time.time() if now is None else now
        return self.accounts.allowlist(username, when, moderator=moderator, password_hash=hashed)

    def ban(self, name: str, reason: str = "", *, now: float | None = None) -> User:
        when = time.time() if now is None else now
        return self.accounts.ban(Username.parse(name), reason, when)

    def unban(self, name: str) -> User:
        return self.accounts.unban(Username.parse(name))

    def users(self) -> list[User]:
        return self.accounts.all()

    def start_new_leaderboard(self) -> None:
        """Forget every contribution (epochs, their figures and held-out evaluations, receipts for
        expert work, per-user totals and days); accounts, sessions and passes stay. For a
        collaboration that starts again from epoch 0 over the same accounts (the local demo's
        ``--keep-accounts``): its epochs must not meet the last run's."""
        # our names, not input
        tables = (
            "contributions",
            "epochs",
            "totals",
            "days",
            "figures",
            "evaluations",
            "receipts",
        )
        with transaction(self._conn):
            for table in tables:
                self._conn.execute(f"DELETE FROM {table}")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> CoordinatorStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
