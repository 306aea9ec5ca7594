"""FailureLog on a fake clock: a server's first failed call is said at once, then one line per
server per period with the count since the last line; servers are counted apart."""

from __future__ import annotations

import logging

import pytest

from core.moe.client.calls import MAX_LOGGED_SERVERS, FailureLog
from core.net.errors import UnavailableError
from core.util.clock import FakeClock

RELAY = "/ip4/10.0.0.1/tcp/5/p2p/QmRelay/p2p-circuit/p2p/QmHome"
LAN = "/ip4/10.201.1.2/tcp/7/p2p/QmHome"


def test_one_line_per_server_per_period_with_the_count(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    failures = FailureLog(every=30.0, clock=clock)
    caplog.set_level(logging.INFO, logger="core.moe.client.calls")
    first = failures.failed(LAN, ConnectionRefusedError("refused"))
    assert first is not None
    for part in (LAN, "unreachable", "refused", "1 since"):
        assert part in first
    assert first in caplog.text
    for _ in range(4):
        clock.advance(5.0)
        assert failures.failed(LAN, ConnectionRefusedError("refused")) is None
    # another server is said at once, on its own
    other = failures.failed(RELAY, TimeoutError("no reply"))
    assert other is not None
    assert "timeout" in other
    assert "1 since" in other
    clock.advance(10.0)  # 30 s after LAN's first line
    due = failures.failed(LAN, UnavailableError("stream reset"))
    assert due is not None
    assert "unavailable" in due
    assert "5 since" in due
    assert failures.failed(LAN, UnavailableError("stream reset")) is None


def test_the_servers_remembered_are_bounded() -> None:
    clock = FakeClock()
    failures = FailureLog(every=30.0, clock=clock)
    for n in range(MAX_LOGGED_SERVERS + 10):
        clock.advance(0.001)
        assert failures.failed(f"/ip4/10.0.0.2/tcp/{n}", OSError("x")) is not None
    assert len(failures) == MAX_LOGGED_SERVERS
    # the oldest were forgotten, so a new failure of theirs is said again at once
    assert failures.failed("/ip4/10.0.0.2/tcp/0", OSError("x")) is not None
