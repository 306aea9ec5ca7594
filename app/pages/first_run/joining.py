"""Joiner: what the wizard's Join (or Next on an offer) asks of the engine, one at a time.

The project is attached (a URL with the project key the volunteer was shown: the engine refuses a
manifest signed by any other); in Add project, when the volunteer chose to contribute to it instead
of the active project, the engine then switches to it; the account is refreshed last, so that the
wizard knows whether the project has a coordinator to log in at. A switch that fails leaves the
project joined beside the active one, and ``switch_problem`` says why (the window tells).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.engine.store import EngineStore
from app.errors import explain
from core.api.errors import ApiError
from core.api.schema import AttachRequest, ProjectInfo


class Joiner(QObject):
    busyChanged = Signal(bool)
    """A command is in flight (True) or answered (False): Join and Back wait meanwhile."""
    failed = Signal(object)
    """The ``ApiError`` of an attach that failed: nothing was joined."""
    done = Signal()
    """The project is joined (and switched to, if asked) and the account refreshed."""

    def __init__(self, store: EngineStore, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.joined: ProjectInfo | None = None
        """The project joined, once the engine answered."""
        self.switch_problem: str | None = None
        """Why the engine did not switch to the joined project."""
        self._switching = False  # the attach under way is followed by a switch to the project

    def forget(self) -> None:
        """A new Add project begins: nothing joined yet."""
        self.joined = None
        self.switch_problem = None

    def attach(self, request: AttachRequest, *, switch: bool = False) -> None:
        """``switch``: contribute to the project once joined, instead of the active one."""
        self._switching = switch
        self.busyChanged.emit(True)
        call = self.store.attach_request(request)
        call.succeeded.connect(self._attached)
        call.failed.connect(self._attach_failed)

    def refresh_account(self) -> None:
        """The project is attached (now, or it was already): the account is refreshed, so that
        the wizard knows its coordinator, then ``done``."""
        call = self.store.refresh_account()
        call.finished.connect(self.done)

    def _attach_failed(self, error: ApiError) -> None:
        self.busyChanged.emit(False)
        self.failed.emit(error)

    def _attached(self, info: object) -> None:
        self.joined = info if isinstance(info, ProjectInfo) else None
        switching, self._switching = self._switching, False
        if switching and self.joined is not None and not self.joined.active:
            # still busy: Join stays off until the engine has switched
            call = self.store.activate_project(self.joined.name)
            call.succeeded.connect(self._activated)
            call.failed.connect(self._not_activated)
            call.finished.connect(lambda: self.busyChanged.emit(False))
            return
        self.busyChanged.emit(False)
        self.refresh_account()

    def _activated(self, info: object) -> None:
        if isinstance(info, ProjectInfo):
            self.joined = info
        self.refresh_account()

    def _not_activated(self, error: ApiError) -> None:
        # joined all the same, beside the active project
        self.switch_problem = explain(error, "switching to the joined project")
        self.refresh_account()
