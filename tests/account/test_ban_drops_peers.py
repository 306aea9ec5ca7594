"""A ban at the coordinator ends the banned user's connections through the revocation list the
keepers read every refresh interval (0.2 s), not the pass renewal (at half the 12 s pass life): two
peers connected with passes from a real coordinator, each kept fresh by its own PassKeeper."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from core.account import AccountSession, CoordinatorClient, PassKeeper
from core.net import CallContext, Host, Identity
from core.net.errors import NetError
from core.net.host.gate import AccessGate
from tests.account.coordinator import PASSWORD, PROJECT, Coordinator
from tests.conftest import FAST
from tests.support.leaks import wait_until


async def echo(ctx: CallContext, request: Any) -> Any:
    return request


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as stack:
        yield stack


async def logged_in_host(username: str, coordinator: Coordinator, stack: AsyncExitStack) -> Host:
    client = await stack.enter_async_context(CoordinatorClient(coordinator.url, timeout=5.0))
    identity = Identity.generate()
    gate = AccessGate(PROJECT, coordinator.key.peer_id, identity.peer_id)
    session = AccountSession(client, await client.login(username, PASSWORD))
    keeper = PassKeeper(session, gate, identity.sign)
    await keeper.start()
    stack.push_async_callback(keeper.close)
    host = Host(identity, FAST, access=gate)
    await host.start()
    stack.push_async_callback(host.close)  # before the coordinator fixture checks for leaks
    host.router.add_raw("test.echo", echo)
    return host


async def test_a_banned_users_peer_is_dropped_within_one_refresh(
    coordinator: Coordinator, stack: AsyncExitStack
) -> None:
    coordinator.add_user("mallory")
    alice = await logged_in_host("alice", coordinator, stack)
    mallory = await logged_in_host("mallory", coordinator, stack)
    assert await mallory.call_raw(alice.addresses[0], "test.echo", 1) == 1
    assert alice.connections(mallory.peer_id)

    assert alice.access is not None
    first_pass = alice.access.own_pass
    coordinator.ban("mallory")
    await wait_until(lambda: not alice.connections(mallory.peer_id))
    # an order of events, not a duration: the ban came with a refresh, before alice's renewal
    # (test_keeper.py counts the refreshes)
    assert alice.access.own_pass is first_pass
    with pytest.raises(NetError, match="revoked"):
        await mallory.call_raw(alice.addresses[0], "test.echo", 2, timeout=3.0)
