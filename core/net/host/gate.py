"""AccessGate: who may talk to us in a moderated project, and the pass we show others.

The gate holds the project's name and public key, this peer's own pass, and the set of peer keys the
coordinator has revoked (those of banned users). The Host asks it about every connection's pass when
the hello arrives and again whenever something changes (a new revocation list, time passing), and the
DHT asks it about the pass inside every record that must carry one. Whoever keeps the pass fresh (the
account layer's pass keeper) calls ``set_pass`` and ``set_revoked``; listeners hear about both. The
keeper also leaves the latest rollback order's text here, where the peer's training reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from core.trust.passes import AccessDenied, AccessPass
from core.trust.peer_id import PeerID
from core.util.clock import SYSTEM_CLOCK, Clock
from core.util.errors import WireFormatError

DEFAULT_GRACE = 30.0
"""Seconds of clock difference between peers forgiven when checking expiry."""
_VERIFIED_CACHE = 4096


class AccessGate:
    def __init__(
        self,
        project: str,
        project_key: PeerID,
        me: PeerID,
        *,
        grace: float = DEFAULT_GRACE,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.project = project
        self.project_key = project_key
        self.me = me
        self.grace = grace
        self.clock = clock
        self.own_pass: AccessPass | None = None
        self.revoked: frozenset[PeerID] = frozenset()
        self.rollback_order: str | None = None
        """The text of the latest rollback order the coordinator serves (``set_rollback_order``).
        Not checked here: the training side verifies it against the project key before use."""
        self._listeners: list[Callable[[], None]] = []
        self._verified: dict[bytes, AccessPass] = {}
        """Passes whose signature we checked (records repeat the same pass many times)."""

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the loop, synchronously) after the pass or revocations change."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def set_pass(self, access: AccessPass) -> None:
        """Use ``access`` from now on; refuses a pass that would not admit us."""
        if access.peer != self.me:
            raise AccessDenied(f"the pass is bound to {access.peer}, not to this peer ({self.me})")
        access.check(self.project, self.project_key, self.clock.time(), grace=self.grace)
        self.own_pass = access
        self._changed()

    def set_revoked(self, peers: Iterable[PeerID]) -> None:
        """Replace the set of revoked peer keys (passes of banned users)."""
        revoked = frozenset(peers)
        if revoked != self.revoked:
            self.revoked = revoked
            self._changed()

    def set_rollback_order(self, text: str | None) -> None:
        """Hold the latest rollback order's text (None: the moderators never ordered one)."""
        self.rollback_order = text

    def presented(self) -> list[object] | None:
        """Our pass in wire form, to put in a hello or a record (None until we have one)."""
        return None if self.own_pass is None else self.own_pass.to_wire()

    def admit(self, peer: PeerID, presented: object) -> AccessPass:
        """The pass ``peer`` presented, if it admits that peer now; ``AccessDenied`` says why not."""
        if presented is None:
            raise AccessDenied("no access pass: this project is moderated (log in to join it)")
        try:
            access = AccessPass.from_wire(presented)
        except WireFormatError as exc:
            raise AccessDenied(f"a malformed access pass: {exc}") from None
        if access.peer != peer:
            raise AccessDenied(f"the pass of {access.username!r} belongs to another peer key")
        if self._verified.get(access.signature) != access:
            access.check(self.project, self.project_key, self.clock.time(), grace=self.grace)
            if len(self._verified) >= _VERIFIED_CACHE:
                self._verified.clear()
            self._verified[access.signature] = access
        self.recheck(access)
        return access

    def recheck(self, access: AccessPass) -> None:
        """Raise ``AccessDenied`` if an admitted pass has since expired or been revoked (no
        signature check: ``admit`` did that, so this is cheap enough to run every second)."""
        if self.clock.time() > access.expires + self.grace:
            raise AccessDenied(f"the pass of {access.username!r} expired")
        if access.peer in self.revoked:
            raise AccessDenied(f"the access of {access.username!r} was revoked by the project")

    def _changed(self) -> None:
        for callback in list(self._listeners):
            callback()
