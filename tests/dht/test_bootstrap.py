"""Joining through an initial peer whose first answer is slow: a ping that ran out of time is sent
again (on a busy machine the first TLS handshake can outlast one RPC's timeout while the connection
goes on being made), a refused or failed dial ends the join at once, and a peer that never answers
ends it after a lookup's time, with the tries said."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from core.dht import DHTConfig, DHTError, DHTNode
from core.dht.messages import PingRequest, PingResponse
from core.dht.routing import Contact
from core.net import Identity
from core.net.errors import DeadlineExceededError, DialError, NetError
from core.net.host.address import PeerAddress

SERVER = Identity.generate().peer_id
INITIAL = f"/ip4/127.0.0.1/tcp/4001/p2p/{SERVER}"


class ScriptedPings:
    """A DHT transport whose pings fail as ``script`` says, one entry per ping, then answer."""

    def __init__(self, script: Sequence[NetError]) -> None:
        self.identity = Identity.generate()
        self.script = list(script)
        self.pings = 0

    def addresses(self) -> list[PeerAddress]:
        return []

    async def ping(self, contact: Contact, request: PingRequest, timeout: float) -> PingResponse:
        self.pings += 1
        if self.script:
            raise self.script.pop(0)
        return PingResponse(client=False, time=0.0)

    async def find(self, contact: Contact, request: object, timeout: float) -> object:
        raise DialError("no other node in this test")

    async def store(self, contact: Contact, request: object, timeout: float) -> object:
        raise DialError("no other node in this test")

    def serve(self, handlers: object) -> None:
        pass

    def unserve(self) -> None:
        pass


CONFIG = DHTConfig(rpc_timeout=2.0, lookup_timeout=10.0)  # five tries


def slow(n: int) -> list[NetError]:
    return [DeadlineExceededError("could not connect within 2 s") for _ in range(n)]


@pytest.mark.parametrize(
    ("script", "pings", "error"),
    [
        ([], 1, None),
        (slow(1), 2, None),
        (slow(4), 5, None),
        (slow(5), 5, r"within 2 s \(5 tries\)"),
        ([DialError("connection refused")], 1, "connection refused"),
        ([*slow(2), DialError("no answer within 10 s")], 3, "no answer within 10 s"),
    ],
    ids=["answers", "slow-once", "slow-four-times", "never-answers", "refused", "dial-gave-up"],
)
async def test_a_slow_first_answer_is_waited_for_and_a_refusal_is_not(
    script: list[NetError], pings: int, error: str | None
) -> None:
    transport = ScriptedPings(script)
    node = DHTNode(transport, CONFIG)  # type: ignore[arg-type]
    try:
        if error is None:
            await node.bootstrap([INITIAL])
            assert SERVER in node.state.table
        else:
            with pytest.raises(DHTError, match=error):
                await node.bootstrap([INITIAL])
        assert transport.pings == pings
    finally:
        await node.close()
