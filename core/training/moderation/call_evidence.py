"""RefusedCalls: the calls an expert server refused for poisoned tensors, as evidence.

An expert server refuses a call whose tensors are not finite (``core.moe.server.server``):
answered as an invalid request, it spoils nothing. Such a call is also evidence against its caller,
as a poisoned part is in an averaging round: the server signs an accusation and publishes it in its
own evidence record (``EvidenceBoard``). A dmoe project has no backbone, so the backbone's
expert server collects everyone's records (``collect``) and hands them to the coordinator's
reporter, as the backbone does in a collaborative project.

One accusation per caller per window (``window`` seconds), however many calls it sent: the value
counts the calls, the reason names the first. A flood of poisoned calls is then a few records a
minute, far below the coordinator's limit per reporter. At most ``MAX_ACCUSED`` callers are accused
in one window; more are counted (``unaccused``) and said in the log. The accusation's chunk is the
ten-second slot it was signed in, so the windows' accusations are distinct for the collector and
the coordinator, while a republished one is not counted twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from core.dht import DHTNode
from core.net import Host
from core.training.moderation.evidence import EvidenceBoard, EvidenceCollector, accusations
from core.trust.evidence import MAX_CHUNK, Evidence
from core.trust.peer_id import PeerID
from core.util.errors import BarnraiseError
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

WINDOW = 60.0
"""Seconds of refused calls gathered into one accusation per caller."""
MIN_WINDOW = 10.0
"""The slot the accusations' chunk counts in: two windows must not share one."""
MAX_ACCUSED = 16
"""Callers accused per window: the evidence record keeps 32 accusations, two windows' worth."""
COLLECTED_KEPT = 256
"""Collected accusations kept for diagnostics and tests (the newest)."""
ROUND_KEY = "expert-calls"
STATISTIC = "refused_calls"


class Refused(Protocol):
    """A refused call as the expert server describes it (``core.moe.server.server.Refusal``)."""

    @property
    def caller(self) -> PeerID: ...

    @property
    def uid(self) -> str: ...

    @property
    def method(self) -> str: ...

    @property
    def reason(self) -> str: ...


@dataclass
class _Offence:
    calls: int
    first: str
    """What the first refused call was and why."""


class RefusedCalls:
    """Turns one expert server's refused calls into signed evidence, a window at a time."""

    def __init__(
        self,
        board: EvidenceBoard,
        *,
        window: float = WINDOW,
        collect: bool = False,
        on_evidence: Callable[[list[Evidence]], None] | None = None,
    ) -> None:
        if window < MIN_WINDOW:
            raise ValueError(f"the evidence window must be at least {MIN_WINDOW:g} seconds")
        self.board = board
        self.window = window
        self.on_evidence = on_evidence
        self._collector = EvidenceCollector(board) if collect else None
        self._pending: dict[PeerID, _Offence] = {}
        self.accused = 0
        """Accusations signed and published so far."""
        self.unaccused = 0
        """Refused calls of callers beyond ``MAX_ACCUSED`` in their window."""
        self.collected: list[Evidence] = []
        """The newest accusations collected from everyone's records (``collect``)."""
        self._tasks = BackgroundTasks("refused-calls")

    def refused(self, call: Refused) -> None:
        """Count one refused call (on the event loop: the server's handler calls this)."""
        offence = self._pending.get(call.caller)
        if offence is not None:
            offence.calls += 1
        elif len(self._pending) < MAX_ACCUSED:
            first = f"{call.method} of {call.uid}: {call.reason}"
            self._pending[call.caller] = _Offence(1, first)
        else:
            if not self.unaccused:
                log.warning("more than %d callers sent poisoned calls at once", MAX_ACCUSED)
            self.unaccused += 1

    def start(self) -> None:
        self._tasks.spawn("windows", self._run())

    async def close(self) -> None:
        """Stop, publishing what the current window gathered (best effort)."""
        await self._tasks.close()
        await self.flush()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.window)
            await self.flush()
            if self._collector is not None:
                await self.collect()

    async def flush(self) -> list[Evidence]:
        """Sign one accusation per caller of this window, publish them, start a new window."""
        pending, self._pending = self._pending, {}
        signed = []
        for caller, offence in pending.items():
            evidence = self.board.accuse(
                caller,
                round_key=ROUND_KEY,
                group=b"",
                chunk=self._slot(),
                statistic=STATISTIC,
                value=float(offence.calls),
                reason=f"{offence.calls} call(s) refused; the first: {offence.first}",
            )
            if evidence is not None:
                signed.append(evidence)
        if signed:
            await self.board.publish_signed(signed, f"{len(signed)} poisoned caller(s)")
            self.accused += len(signed)
        return signed

    async def collect(self) -> list[Evidence]:
        """Everyone's accusations not collected before: logged and handed to ``on_evidence``."""
        if self._collector is None:
            raise RuntimeError("this server does not collect evidence")
        try:
            fresh = await self._collector.collect()
        except BarnraiseError as exc:
            log.info("collecting evidence failed: %s", exc)
            return []
        for line in accusations(fresh, {}):
            log.warning(line)
        found = [item.evidence for item in fresh]
        self.collected = (self.collected + found)[-COLLECTED_KEPT:]
        if found and self.on_evidence is not None:
            self.on_evidence(found)
        return found

    def _slot(self) -> int:
        return int(self.board.clock.time() // MIN_WINDOW) % MAX_CHUNK


def evidence_of_refusals(
    project: str,
    *,
    window: float = WINDOW,
    collect: bool = False,
    on_evidence: Callable[[list[Evidence]], None] | None = None,
) -> Callable[[DHTNode, Host], RefusedCalls]:
    """What an expert server of ``project`` builds, once its host and DHT node exist, to turn its
    refused calls into evidence (``collect``: the backbone's server, which also reports)."""
    if window < MIN_WINDOW:
        raise ValueError(f"the evidence window must be at least {MIN_WINDOW:g} seconds")

    def build(dht: DHTNode, host: Host) -> RefusedCalls:
        board = EvidenceBoard(dht, host.identity, project, access=host.access)
        return RefusedCalls(board, window=window, collect=collect, on_evidence=on_evidence)

    return build
