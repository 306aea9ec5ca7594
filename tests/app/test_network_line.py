"""How the dashboard says whether others can reach this computer: the words, and the line itself."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from pytestqt.qtbot import QtBot

from app import wording
from app.pages.dashboard import DashboardPage
from app.window import MainWindow
from core.api import Network, NetworkChanged
from core.api.testing import FakeEngine

PRIVATE = Network("private", peers=4, direct=3, relayed=1)


@pytest.mark.parametrize(
    ("network", "line"),
    [
        (Network("public", "203.0.113.7:4001", peers=4, direct=4), "Reachable from the internet"),
        (Network(), "Checking how others can reach you…"),
        (Network("unknown", peers=2, direct=2), "Checking how others can reach you…"),
        (PRIVATE, "Behind a router: direct to 3 of 4 peers"),
        (
            Network("private", peers=4, direct=1, punched=2, relayed=1),
            "Behind a router: direct to 3 of 4 peers",
        ),
        (Network("private", peers=2, relayed=2), "Behind a router: through a relay"),
        (Network("private", peers=3, direct=3), "Behind a router: direct to all 3 peers"),
        (Network("private", peers=1, direct=1), "Behind a router: direct to 1 peer"),
        (Network("private"), "Behind a router: not connected to other peers yet"),
    ],
)
def test_network_line(network: Network, line: str) -> None:
    assert wording.network_line(network) == line


def test_network_detail_says_where_and_when() -> None:
    public = Network("public", "203.0.113.7:4001", checked_at=1000.0)
    assert wording.network_detail(public, 1000.0 + 300) == (
        "Other peers can connect to this computer at 203.0.113.7:4001 (checked 5 min ago)"
    )
    assert "through a relay" in wording.network_detail(PRIVATE, 0.0)


def test_a_new_verdict_is_an_event_in_plain_words(fake: FakeEngine) -> None:
    fake.set_network(PRIVATE)
    event = fake.recent[-1]
    assert isinstance(event.data, NetworkChanged)
    assert wording.describe_event(event) == ("Network", "Behind a router: direct to 3 of 4 peers")
    fake.set_network(dataclasses.replace(PRIVATE, direct=2, relayed=2))  # same verdict: no event
    assert fake.recent[-1] is event


def test_the_dashboard_shows_the_network_line(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    page = make_window(fake).page["dashboard"]
    assert isinstance(page, DashboardPage)
    qtbot.waitUntil(lambda: page.state_word.text() == "Contributing")
    assert page.network.isHidden()  # the engine says nothing about the network yet
    fake.set_network(Network())
    qtbot.waitUntil(lambda: page.network.text() == "Checking how others can reach you…")
    assert not page.network.isHidden()
    fake.set_network(PRIVATE)
    qtbot.waitUntil(lambda: page.network.text() == "Behind a router: direct to 3 of 4 peers")
    fake.set_network(Network("public", "203.0.113.7:4001", checked_at=0.0, peers=4, direct=4))
    qtbot.waitUntil(lambda: page.network.text() == "Reachable from the internet")
    assert "203.0.113.7:4001" in page.network.toolTip()
