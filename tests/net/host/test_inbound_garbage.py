"""Inbound connections that never become peers leave no reference cycles behind.

A flood drops thousands of connections a second. What only the cyclic collector can free piles up
between its rare full passes, grows the heap, and scatters the long-lived objects allocated meanwhile
so that the memory is never returned after the flood (``benchmarks/net/flood.py``). So each
way a stranger's connection can end is checked to free everything by reference counting alone.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from contextlib import contextmanager

from core.net import NetConfig
from tests.conftest import MakeHost
from tests.support.leaks import wait_until
from tests.support.rawpeer import close_writer

# what an inbound connection is made of before TLS (by type name: some are private to asyncio)
WATCHED = {"Attempt", "Waiting", "Unwrapped", "_SelectorSocketTransport", "TransportSocket"}


@contextmanager
def no_automatic_collection() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def cyclic_garbage() -> dict[str, int]:
    """Collect, and count the watched objects that were unreachable cycles (freed by the collector
    alone)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found: dict[str, int] = {}
        for obj in gc.garbage:
            name = type(obj).__name__
            if name in WATCHED:
                found[name] = found.get(name, 0) + 1
        return found
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def test_dropped_silent_and_hung_up_connections_are_freed_without_the_collector(
    make_host: MakeHost,
) -> None:
    server = await make_host(
        NetConfig(max_pending_per_ip=2, handshake_timeout=0.3, dial_timeout=2.0)
    )
    address = server.addresses[0]
    assert address.host is not None
    assert address.port is not None
    with no_automatic_collection():
        # four silent connections from one address: the first two are dropped to admit the others
        # (the admission's drop), the others stay silent until the handshake deadline
        writers = []
        for _ in range(4):
            _, writer = await asyncio.open_connection(address.host, address.port)
            writers.append(writer)
            await wait_until(lambda: server.inbound.admission.pending >= 1)
        await wait_until(lambda: server.inbound.admission.dropped >= 2)
        await wait_until(lambda: server.inbound.admission.pending == 0, timeout=5.0)
        # and one that hangs up before a word
        _, quitter = await asyncio.open_connection(address.host, address.port)
        await wait_until(lambda: server.inbound.admission.pending == 1)
        await close_writer(quitter)
        await wait_until(lambda: server.inbound.admission.pending == 0)
        # the transports' connection_lost callbacks, a few turns of the loop later: nothing tells
        # when they ran but a collection, and that would free the very cycles counted next
        await asyncio.sleep(0.1)
        assert cyclic_garbage() == {}
        for writer in writers:
            await close_writer(writer)
