"""PassKeeper against a real coordinator: first pass, renewal, revocations, bans, outages.

The project's passes live 12 s and peers check revocations every 0.2 s, so renewal (at half the
remaining life) happens after about 6 s and a ban shows at the next check. What is asserted is the
order of events (renewed after half the life and before the end; the ban read by the first refresh
after it), never how long something took: a busy machine is late, not wrong.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from core.account import (
    AccessRefused,
    AccountError,
    AccountSession,
    CoordinatorClient,
    CoordinatorUnavailable,
    NotLoggedIn,
    PassKeeper,
)
from core.net import Identity, PeerID
from core.net.host.gate import AccessGate
from tests.account.coordinator import PASSWORD, PROJECT, Coordinator
from tests.support.leaks import wait_until


@pytest.fixture
async def keeper(
    coordinator: Coordinator, client: CoordinatorClient
) -> AsyncIterator[tuple[PassKeeper, list[AccountError]]]:
    """alice's keeper, started, with the errors it reported."""
    session = AccountSession(client, await client.login("alice", PASSWORD))
    identity = Identity.generate()
    gate = AccessGate(PROJECT, coordinator.key.peer_id, identity.peer_id)
    errors: list[AccountError] = []
    keeper = PassKeeper(session, gate, identity.sign, on_error=errors.append)
    await keeper.start()
    try:
        yield keeper, errors
    finally:
        await keeper.close()


async def test_the_pass_is_renewed_at_half_its_life(
    keeper: tuple[PassKeeper, list[AccountError]], coordinator: Coordinator
) -> None:
    keeper_, errors = keeper
    gate = keeper_.gate
    first = gate.own_pass
    assert first is not None
    assert keeper_.expires == first.expires
    renewed_at: list[float] = []

    def on_change() -> None:
        if gate.own_pass is not first and not renewed_at:
            renewed_at.append(time.time())

    gate.add_listener(on_change)
    await wait_until(lambda: bool(renewed_at))
    renewed = gate.own_pass
    assert renewed is not None
    # not before half its life (the keeper got it after it was issued, and waits half of what was
    # left), and before it ran out (a renewal that late would lock the peer out)
    assert (first.issued + first.expires) / 2 <= renewed_at[0] < first.expires, renewed_at
    assert renewed.expires > first.expires
    assert renewed.peer == gate.me
    assert keeper_.running
    assert errors == []


async def test_a_ban_reaches_the_gate_at_the_next_refresh_and_stops_renewal(
    keeper: tuple[PassKeeper, list[AccountError]],
    coordinator: Coordinator,
    client: CoordinatorClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keeper_, errors = keeper
    gate = keeper_.gate
    coordinator.add_user("mallory")
    mallory_key = Identity.generate()
    mallory_peer = mallory_key.peer_id
    mallory = await client.login("mallory", PASSWORD)
    await client.request_pass(mallory, mallory_peer, mallory_key.sign, project=PROJECT)

    # counted in refreshes, not seconds: how many the keeper began after the ban before it knew
    refreshes: list[None] = []
    learned: list[int] = []
    read = client.revocations

    async def reading() -> frozenset[PeerID]:
        refreshes.append(None)
        return await read()

    def on_change() -> None:
        if mallory_peer in gate.revoked and not learned:
            learned.append(len(refreshes))

    monkeypatch.setattr(client, "revocations", reading)
    gate.add_listener(on_change)
    coordinator.ban("mallory")
    await wait_until(lambda: bool(learned))
    assert learned[0] <= 1  # the refresh under way at the ban, or else the next one
    assert keeper_.running
    assert errors == []

    coordinator.ban("alice")  # our own account: renewing stops, the pass runs out by itself
    await wait_until(lambda: not keeper_.running)
    assert gate.me in gate.revoked
    assert isinstance(keeper_.refused, AccessRefused)
    assert [type(e) for e in errors] == [AccessRefused]
    assert "banned" in str(errors[0])


async def test_an_outage_is_reported_and_retried(
    keeper: tuple[PassKeeper, list[AccountError]], coordinator: Coordinator
) -> None:
    keeper_, errors = keeper
    await coordinator.service.close()
    await wait_until(lambda: len(errors) >= 2)  # reported, and tried again
    assert all(isinstance(e, CoordinatorUnavailable) for e in errors)
    assert keeper_.running  # still trying: the coordinator may come back
    assert isinstance(keeper_.error, CoordinatorUnavailable)


async def test_a_keeper_that_cannot_get_a_pass_says_why(
    coordinator: Coordinator, client: CoordinatorClient
) -> None:
    identity = Identity.generate()
    gate = AccessGate(PROJECT, coordinator.key.peer_id, identity.peer_id)
    with pytest.raises(NotLoggedIn, match="log in"):
        await PassKeeper(AccountSession(client, None), gate, identity.sign).start()
    tokens = await client.login("alice", PASSWORD)
    coordinator.ban("alice")
    with pytest.raises(AccessRefused, match="banned"):
        await PassKeeper(AccountSession(client, tokens), gate, identity.sign).start()
    # a coordinator that signs with another key than the manifest names
    other = AccessGate(PROJECT, Identity.generate().peer_id, gate.me)
    coordinator.service.store.unban("alice")
    with pytest.raises(AccountError, match="does not admit this peer"):
        await PassKeeper(AccountSession(client, tokens), other, identity.sign).start()
    assert gate.own_pass is None
