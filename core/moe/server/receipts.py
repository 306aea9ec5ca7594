"""An expert server's ``ReceiptBook``: what it answered each trainer, and the trainers' receipts for
that work (the signed record itself is ``core.trust.receipts``; the trainer that signs and hands them
over is ``core.moe.client.receipts``).

The book counts what the server answered to each trainer (by the TLS identity of the call, never the
caller's word) and keeps each (trainer, session)'s newest receipt, once it has checked that: the
trainer itself hands it over, it names this project and this server, the trainer's key signed it,
and its totals, with the newest totals of that trainer's other sessions, do not exceed what this
server answered to that trainer. So a trainer cannot over-credit a server, and a server cannot make
a receipt up. ``take`` hands the receipts that changed since the last call to whoever reports them
(the expert host, to the coordinator).

A server that restarts under the same identity counts from zero again, and refuses the receipts of
trainer sessions that began before; the trainers' next runs count afresh.
"""

from __future__ import annotations

from core.net.errors import InvalidRequestError
from core.trust.peer_id import PeerID
from core.trust.receipts import InvalidReceipt, Receipt

SLACK_SHARE = 0.001
"""How far a receipt's totals may exceed what the server counted, as a share of it. The trainer
counts a call once its reply came whole and the server counts it before it ends the call, so an
honest receipt never exceeds; this margin is worth a thousandth, nothing a cheat could live on."""
MAX_SESSIONS = 16
"""Sessions a server keeps per trainer (each a process run): more is not a trainer, but a flood."""


class ReceiptBook:
    """An expert server's count of what it answered per trainer, and the receipts it checked."""

    def __init__(self, project: str, server: PeerID, *, slack_share: float = SLACK_SHARE) -> None:
        self.project = project
        self.server = server
        self.slack_share = slack_share
        self.refused = 0
        self._served: dict[PeerID, list[int]] = {}
        self._newest: dict[tuple[PeerID, bytes], Receipt] = {}
        self._sessions: dict[PeerID, list[bytes]] = {}
        self._pending: dict[tuple[PeerID, bytes], Receipt] = {}

    def served(self, trainer: PeerID, method: str, samples: int) -> None:
        """This server answered ``trainer``'s ``method`` call of ``samples`` (on the loop)."""
        counts = self._served.setdefault(trainer, [0, 0])
        counts[0 if method == "forward" else 1] += samples

    def served_to(self, trainer: PeerID) -> tuple[int, int]:
        counts = self._served.get(trainer, [0, 0])
        return (counts[0], counts[1])

    def newest(self, trainer: PeerID, session: bytes) -> Receipt | None:
        return self._newest.get((trainer, session))

    @property
    def receipts(self) -> list[Receipt]:
        """The newest receipt of every (trainer, session)."""
        return list(self._newest.values())

    def accept(self, receipt: Receipt, sender: PeerID) -> bool:
        """Keep ``receipt`` as its session's newest; False if one as new is held already.
        ``InvalidRequestError``, saying why, for a receipt this server does not take."""
        try:
            return self._accept(receipt, sender)
        except InvalidRequestError:
            self.refused += 1
            raise

    def take(self) -> list[Receipt]:
        """The receipts kept since the last call (the newest of each session), to report."""
        pending, self._pending = self._pending, {}
        return list(pending.values())

    def _accept(self, receipt: Receipt, sender: PeerID) -> bool:
        if receipt.trainer != sender:
            raise InvalidRequestError("a receipt is handed over by the trainer that signed it")
        if receipt.project != self.project:
            raise InvalidRequestError(
                f"the receipt is for project {receipt.project[:100]!r}, this server serves "
                f"{self.project!r}"
            )
        if receipt.server != self.server:
            raise InvalidRequestError("the receipt names another server")
        try:
            receipt.verify()
        except InvalidReceipt as exc:
            raise InvalidRequestError(str(exc)) from None
        key = (receipt.trainer, receipt.session)
        held = self._newest.get(key)
        if held is not None and held.sequence >= receipt.sequence:
            return False
        sessions = self._sessions.get(receipt.trainer, [])
        if held is None and len(sessions) >= MAX_SESSIONS:
            raise InvalidRequestError(
                f"this server keeps at most {MAX_SESSIONS} sessions per trainer"
            )
        self._check_totals(receipt)
        if held is None:
            self._sessions.setdefault(receipt.trainer, []).append(receipt.session)
        self._newest[key] = receipt
        self._pending[key] = receipt
        return True

    def _check_totals(self, receipt: Receipt) -> None:
        """The trainer's sessions together may claim what this server answered it, no more."""
        claimed = [receipt.forward_samples, receipt.backward_samples]
        for session in self._sessions.get(receipt.trainer, []):
            other = self._newest[receipt.trainer, session]
            if session != receipt.session:
                claimed[0] += other.forward_samples
                claimed[1] += other.backward_samples
        served = self.served_to(receipt.trainer)
        for name, claim, count in zip(("forward", "backward"), claimed, served, strict=True):
            if claim > count + int(count * self.slack_share):
                raise InvalidRequestError(
                    f"the receipt claims {claim} {name} samples; this server answered {count} "
                    "to that trainer"
                )
