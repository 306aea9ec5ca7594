"""The sockets of a hole punch: connects from our listening port, repeated for a short window.

Each punching socket binds the port our listener has (SO_REUSEADDR, plus SO_REUSEPORT where the
system has it; our listeners set it too, see ``core.net.host.host``). On a NAT that preserves ports,
its packets then leave from the public port the peer was told about; and the peer's SYN, arriving
at that port from the address we are connecting to, matches our socket's four-tuple before it
could match the listener, so both connects become one TCP connection (simultaneous open), or the
peer's listener answers ours (an ordinary handshake). Either way there is one connection per pair
of addresses; the caller decides which TLS role runs over it.

A socket keeps its SYN in flight for the whole window (the kernel retransmits it), because a
socket closed early would leave our NAT's entry behind with nothing at our end to meet the peer's
SYN but the listener. Only a connect that fails at once (refused, unreachable) is retried, with a
fresh socket after a short gap.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable
from dataclasses import dataclass

from core.net.host.advertise import parse_ip
from core.net.punch.candidates import Candidate, show_candidate


@dataclass(frozen=True, slots=True)
class DialFailure:
    """Why one candidate gave no connection."""

    candidate: Candidate
    answered: bool
    """False: nothing came back in the window (a NAT dropped our SYNs, or the peer's never came)."""
    reason: str

    def __str__(self) -> str:
        return f"{show_candidate(self.candidate)}: {self.reason}"


class _Held(asyncio.Protocol):
    """Holds a fresh TCP connection, not reading, until TLS takes it over."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # the TLS ClientHello must stay in the socket for start_tls


def punch_socket(local: Candidate) -> socket.socket:
    """A non-blocking TCP socket bound to ``local`` beside the listener on that port."""
    family = socket.AF_INET6 if ":" in local[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.setblocking(False)
        sock.bind(local)
    except BaseException:
        sock.close()
        raise
    return sock


def local_for(candidate: Candidate, listen_hosts: list[str], port: int) -> Candidate | None:
    """Where to bind a socket that dials ``candidate``: a listener's address of its IP family."""
    ip = parse_ip(candidate[0])
    if ip is None:
        return None
    for host in listen_hosts:
        bound = parse_ip(host)
        if bound is not None and bound.version == ip.version:
            return host, port
    return None


async def connect_from(
    local: Candidate,
    remote: Candidate,
    *,
    deadline: float,
    redial_gap: float,
) -> asyncio.Transport:
    """Connect from ``local`` to ``remote`` until the loop time ``deadline``; ``DialFailure`` else."""
    loop = asyncio.get_running_loop()
    last = DialFailure(remote, answered=False, reason="no answer")
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise _Failed(last)
        try:
            sock = punch_socket(local)
        except OSError as exc:
            raise _Failed(
                DialFailure(remote, True, f"cannot bind {local}: {exc.strerror}")
            ) from None
        try:
            async with asyncio.timeout(remaining):
                await loop.sock_connect(sock, remote)
        except TimeoutError:
            sock.close()
            raise _Failed(last) from None
        except OSError as exc:
            sock.close()
            answered = exc.errno == errno.ECONNREFUSED
            if exc.errno in (errno.EADDRNOTAVAIL, errno.EADDRINUSE):
                # this four-tuple is taken: the peer's SYN reached our listener first, and that
                # connection (accepted there) is the punch's; no socket of ours can have it
                reason = "the pair of ports is already connected"
            else:
                reason = exc.strerror or str(exc)
            last = DialFailure(remote, answered, reason)
            await asyncio.sleep(max(0.0, min(redial_gap, deadline - loop.time())))
            continue
        except BaseException:
            sock.close()
            raise
        try:
            transport, _ = await loop.create_connection(_Held, sock=sock)
        except BaseException:
            sock.close()
            raise
        assert isinstance(transport, asyncio.Transport)
        return transport


class _Failed(Exception):
    def __init__(self, failure: DialFailure) -> None:
        super().__init__(str(failure))
        self.failure = failure


async def connect_all(
    locals_for: Callable[[Candidate], Candidate | None],
    remotes: list[Candidate],
    *,
    deadline: float,
    redial_gap: float,
    on_connected: Callable[[asyncio.Transport, Candidate], None],
) -> list[DialFailure]:
    """Dial every remote at once until ``deadline``; each connection goes to ``on_connected``.

    Returns the failures (empty when every remote connected). Cancelling it closes the sockets
    still trying; connections already handed over are the receiver's.
    """
    failures: list[DialFailure] = []

    async def one(remote: Candidate) -> None:
        local = locals_for(remote)
        if local is None:
            failures.append(DialFailure(remote, True, "we have no listener of its IP family"))
            return
        try:
            transport = await connect_from(local, remote, deadline=deadline, redial_gap=redial_gap)
        except _Failed as failed:
            failures.append(failed.failure)
            return
        on_connected(transport, remote)

    tasks = [
        asyncio.create_task(one(remote), name=f"punch-dial-{show_candidate(remote)}")
        for remote in remotes
    ]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return failures


def why_not(failures: list[DialFailure], handshake_errors: list[str]) -> str:
    """One line for the log: why no direct connection came of a round."""
    if handshake_errors:
        return "connected, but the handshake failed: " + "; ".join(handshake_errors)
    if not failures:
        return "no connection in time"
    silent = [f for f in failures if not f.answered]
    if len(silent) == len(failures):
        places = ", ".join(show_candidate(f.candidate) for f in silent)
        return f"no answer from {places} (symmetric NAT?)"
    return "; ".join(str(f) for f in failures)
