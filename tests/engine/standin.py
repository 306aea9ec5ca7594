"""A stand-in for the engine's peer: building a real one needs a swarm and data, and these tests
look only at what the runner hands the peer (its settings) and when it builds or closes one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core.worker.events import PeerEvent, PeerNetwork, PeerReady

if TYPE_CHECKING:  # torch loads only in the tests that build peers
    from core.training.peer import project_peer as runtime


class StandInPeer:
    """Takes the place of ProjectPeer: records its settings, is ready at once, runs until told."""

    def __init__(
        self, settings: runtime.PeerSettings, on_event: Callable[[PeerEvent], None]
    ) -> None:
        self.settings = settings
        self.on_event = on_event
        self.closed = False
        self.control = self.Control()
        self.reachability: Any = None
        """A stand-in for ``ProjectPeer.reachability`` (its ``diagnostics()`` is all the engine asks)."""
        self.network_now = PeerNetwork("unknown")
        self.waiting_for: str | None = None
        """Why it cannot contribute now (``ProjectPeer.waiting_for``): a test may set it."""
        self.totals: dict[str, Any] = {}
        """Its running totals (``ProjectPeer.progress``): a test may set them to be metered."""

    class Control:
        def close(self) -> None:
            pass

    async def run(self, stop: asyncio.Event) -> None:
        self.on_event(PeerReady("127.0.0.1:1"))
        await stop.wait()

    async def pause(self) -> None:
        pass

    async def resume(self, duty: float) -> None:
        pass

    async def set_threads(self, threads: int) -> None:
        pass

    def progress(self) -> dict[str, Any]:
        return dict(self.totals)

    def network(self) -> PeerNetwork:
        return self.network_now

    async def close(self) -> None:
        self.closed = True
