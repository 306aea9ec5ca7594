"""The credit check through the control API and ``barnraise ctl credit``, against a real coordinator
on loopback: the epochs the engine's (stand-in) peer landed, kept in the ledger, beside what the
coordinator credited to the engine's key, and why each epoch that differs does."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.account import AccountSession, CoordinatorClient
from core.api import AttachRequest, Conflict, CreditDifference, LoginRequired
from core.engine.credit import DIFFERENT, HELD, NO_RECORD, NOT_REPORTED
from core.trust.passes import pass_to_text
from core.worker.events import PeerEpoch
from tests.account.coordinator import PASSWORD, Coordinator, running_coordinator
from tests.engine.standin import StandInPeer
from tests.support.engine import CtlRun, Running, until

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"


@pytest.fixture
async def coordinator(tmp_path: Path) -> AsyncIterator[Coordinator]:
    async with running_coordinator(tmp_path) as running:
        running.add_user("alice")
        running.add_user("mod", moderator=True)
        yield running


def landed(epoch: int, samples: int) -> PeerEpoch:
    return PeerEpoch(epoch, samples, 3, True, "averaged 3 of 3 parts", 1.5)


@dataclass(frozen=True)
class Share:
    peer: str
    access: str
    """The text of the peer's pass."""

    def of(self, samples: int) -> dict[str, Any]:
        return {"peer": self.peer, "pass": self.access, "samples": samples, "compute_seconds": 1.0}


async def report(
    coordinator: Coordinator, epoch: int, *shares: dict[str, Any], late: bool = False
) -> None:
    """What the backbone does after an epoch: report the peers' shares in it."""
    async with CoordinatorClient(coordinator.url) as http:
        moderator = AccountSession(http, await http.login("mod", PASSWORD))
        body = {
            "epoch": epoch,
            "time": time.time(),
            "samples": sum(share["samples"] for share in shares),
            "contributions": list(shares),
            "late": late,
        }
        answer = await moderator.report_contributions(body)
        assert answer["accepted"] == len(shares), answer


async def test_the_engines_count_beside_the_coordinators_credit(
    engine: Running,
    coordinator: Coordinator,
    tmp_path: Path,
    peers: list[StandInPeer],
    ctl_run: CtlRun,
) -> None:
    client = engine.client
    await client.attach(AttachRequest(str(coordinator.manifest_file(tmp_path))))
    with pytest.raises(LoginRequired, match="barnraise ctl login"):
        await client.credit_check()
    await client.set_settings({"max_other_cpu_percent": 100, "cpu_when_in_use": "pause"})
    await client.start()
    await client.login("alice", PASSWORD)
    await until(client, lambda s: s.state == "running")
    (peer,) = peers
    gate = peer.settings.access
    assert gate is not None
    assert gate.own_pass is not None
    me = str(gate.me)  # the engine's own key, which its pass proved to alice's account
    mine = Share(me, pass_to_text(gate.own_pass))

    nothing = await client.credit_check()
    assert (nothing.peer, nothing.matches, nothing.epochs, nothing.since) == (me, True, 0, None)
    assert nothing.summary.startswith("Nothing to compare yet")

    peer.on_event(landed(1, 64))
    await report(coordinator, 1, mine.of(64))
    match = await client.credit_check()
    assert (match.matches, match.differences, match.epochs, match.since) == (True, [], 1, 1)
    assert (match.local_samples, match.credited_samples, match.credited_total) == (64, 64, 64)
    assert match.summary == "Your counts match the project's: 64 samples over 1 epoch."

    peer.on_event(landed(2, 48))  # the backbone has not reported epoch 2 yet
    pending = await client.credit_check()
    assert not pending.matches
    assert pending.differences == [CreditDifference(2, 48, 0, NOT_REPORTED)]
    assert pending.summary == (
        "48 samples differ: 1 epoch not reported yet (48 samples). The other 1 epoch matches. "
        "Check again in a minute."
    )

    await report(coordinator, 2)  # reported, but without this computer's share
    await report(coordinator, 4, mine.of(10))  # this computer has no record of epoch 4
    peer.on_event(landed(5, 20))
    await report(coordinator, 5, mine.of(25))
    peer.on_event(landed(6, 16))
    peer.on_event(landed(6, 99))  # an epoch heard of twice counts once, as the coordinator does
    check = await client.credit_check()
    assert check.differences == [
        CreditDifference(2, 48, 0, HELD),  # the project checks work (its default rate)
        CreditDifference(4, 0, 10, NO_RECORD),
        CreditDifference(5, 20, 25, DIFFERENT),
        CreditDifference(6, 16, 0, NOT_REPORTED),
    ]
    assert (check.matches, check.epochs, check.since) == (False, 5, 1)
    assert (check.local_samples, check.credited_samples) == (64 + 48 + 20 + 16, 64 + 10 + 25)
    assert check.summary.startswith("79 samples differ: 1 epoch not reported yet (16 samples); ")
    assert "1 epoch not credited yet (48 samples)" in check.summary

    # a late report credits epoch 2 after all
    await report(coordinator, 2, mine.of(48), late=True)
    later = await client.credit_check()
    assert [d.epoch for d in later.differences] == [4, 5, 6]

    out = await ctl_run("credit")
    assert later.summary in out
    assert f"peer key {me}" in out
    assert NO_RECORD in out
    as_json = json.loads(await ctl_run("credit", "--json"))
    assert as_json["differences"][0] == {"epoch": 4, "local": 0, "credited": 10,
                                         "reason": NO_RECORD}  # fmt: skip


async def test_an_open_project_has_no_credit_to_check(engine: Running) -> None:
    with pytest.raises(Conflict, match="attach one first"):
        await engine.client.credit_check()
    await engine.client.attach(AttachRequest(str(DEMO)))
    with pytest.raises(Conflict, match="no coordinator"):
        await engine.client.credit_check()
