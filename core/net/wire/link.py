"""What streams and calls need of the connection they run on.

``stream``, ``calls_in``, ``calls_out`` and ``rpc`` see their connection only through these two
protocols and never import ``connection`` (which builds them all), so ``core.net`` has no import
cycle, and a stream or a call can run against a small fake in tests. ``Connection`` satisfies both
structurally: mypy checks it wherever the connection hands itself to the calls it owns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from core.net.config import NetConfig
    from core.net.wire.frames import Kind
    from core.trust.peer_id import PeerID


class StreamLink(Protocol):
    """What a ``Stream`` needs: the limits, sending its frames, and waiting for room to send."""

    @property
    def config(self) -> NetConfig: ...

    def write_frame(self, kind: Kind, call_id: int, payload: bytes = b"") -> None:
        """Send one frame; raises ``ConnectionClosedError`` once the link is gone."""

    def write_data(self, call_id: int, data: memoryview) -> None:
        """Send one chunk of stream data (encrypted before this returns, so ``data`` may be reused)."""

    def send_if_open(self, kind: Kind, call_id: int, payload: bytes = b"") -> None:
        """Send one frame if the link is still up; do nothing otherwise."""

    async def pace_upload(self, size: int) -> None:
        """Wait as long as the upload limit requires before ``size`` bytes of stream data go out."""

    async def drain(self) -> None:
        """Wait while the send buffer is above its high-water mark."""


class Link(StreamLink, Protocol):
    """What the calls either way need as well: who the peer is, call ids, whether calls may open."""

    @property
    def peer(self) -> PeerID | None:
        """The authenticated peer (known before any call frame is handled)."""

    @property
    def initiator(self) -> bool:
        """Whether we dialed (our call ids are odd) or accepted (even)."""

    @property
    def peer_window(self) -> int:
        """The send window a new stream starts with."""

    @property
    def is_usable(self) -> bool:
        """Whether we may open new calls."""

    @property
    def closing(self) -> bool:
        """Whether the peer's new calls are to be refused."""

    @property
    def close_reason(self) -> str | None:
        """Why the link is closing or closed, once known."""

    def describe(self) -> str:
        """The peer and its address, for messages."""

    def is_ours(self, call_id: int) -> bool:
        """Whether we opened that call."""

    def calls_changed(self) -> None:
        """A call started or ended (the link tracks when none is left, for a graceful close)."""
