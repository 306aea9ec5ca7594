"""Dialing a peer that has several addresses: in a sensible order, in parallel with a stagger.

Order: public addresses first (they work from anywhere), then LAN addresses (they work only from
the same network, and in another home the same private address may be a different computer: the
TLS identity check catches that), host names, loopback, and relayed addresses last (a relay costs
someone else's bandwidth). An attempt starts every ``stagger`` seconds, or at once when the previous
one failed; the first connection that succeeds wins and the others are cancelled or closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from core.net.host.address import PeerAddress
from core.net.host.advertise import is_lan, parse_ip

T = TypeVar("T")

DIAL_STAGGER = 0.25
"""Seconds between starting two attempts (a LAN address that times out must not delay a good one)."""


def dial_rank(address: PeerAddress) -> int:
    """0 public IP, 1 LAN IP, 2 host name, 3 loopback or other local, 4 relayed."""
    if address.is_relayed:
        return 4
    ip = parse_ip(address.host or "")
    if ip is None:
        return 2
    if ip.is_loopback or ip.is_link_local or ip.is_unspecified:
        return 3
    return 1 if is_lan(ip) else 0


def dial_order(addresses: Sequence[PeerAddress]) -> list[PeerAddress]:
    """``addresses`` without duplicates, best first (stable within a rank)."""
    unique = list(dict.fromkeys(addresses))
    return sorted(unique, key=dial_rank)


class AllAttemptsFailed(Exception):
    """Every attempt failed; ``errors`` in the attempts' order."""

    def __init__(self, errors: list[BaseException]) -> None:
        super().__init__(f"{len(errors)} attempts failed")
        self.errors = errors


async def first_success(
    attempts: Sequence[Callable[[], Awaitable[T]]],
    *,
    stagger: float,
    discard: Callable[[T], Awaitable[None]],
) -> T:
    """Run ``attempts`` staggered and return the first result (``AllAttemptsFailed`` if none).

    Results that arrive after the winner (two attempts finishing together) go to ``discard``.
    """
    errors: list[BaseException | None] = [None] * len(attempts)
    running: dict[asyncio.Task[T], int] = {}
    winner: T | None = None  # attempts never return None
    next_index = 0
    try:
        while winner is None and (next_index < len(attempts) or running):
            if next_index < len(attempts):
                task = asyncio.ensure_future(attempts[next_index]())
                running[task] = next_index
                next_index += 1
                timeout: float | None = stagger if next_index < len(attempts) else None
            else:
                timeout = None
            done, _ = await asyncio.wait(
                running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                index = running.pop(task)
                error = task.exception()
                if error is not None:
                    errors[index] = error
                elif winner is None:
                    winner = task.result()
                else:
                    await discard(task.result())
    finally:
        leftovers = list(running)
        for task in leftovers:
            task.cancel()
        for late in await asyncio.gather(*leftovers, return_exceptions=True):
            if not isinstance(late, BaseException):  # it won the race against its cancellation
                await discard(late)
    if winner is None:
        raise AllAttemptsFailed([error for error in errors if error is not None])
    return winner
