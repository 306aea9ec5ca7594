"""Evidence reports from the backbone: signed accusations kept, forged and malformed ones
refused without losing the rest, bounded per report and per reporter, listed by accused peer, and a
ban of the accused's account revokes its peers."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from core.coordinator import CoordinatorStore
from core.coordinator.errors import StoreError
from core.coordinator.reports import evidence_report as judging
from core.coordinator.schema import _MIGRATIONS, APPLICATION_ID, SCHEMA_VERSION
from core.net import Identity
from core.trust.evidence import Evidence, sign_evidence
from core.trust.reports import EVIDENCE
from core.util.files.sqlite_file import SqliteFile
from tests.coordinator.conftest import PROJECT, Running


def accuse(
    running: Running, reporter: Identity, accused: Identity, *, part: int = 0, **changes: Any
) -> Evidence:
    fields: dict[str, Any] = {
        "round_key": "grads.5",
        "group": b"\x01\x02",
        "epoch": 5,
        "part": part,
        "chunk": -1,
        "statistic": "norm_ratio",
        "value": 850.0,
        "reason": "norm 850× the group's median",
        "time": running.clock.time(),
    }
    fields.update(changes)
    project = fields.pop("project", PROJECT)
    return sign_evidence(reporter, project, accused.peer_id, **fields)


async def prove(running: Running, user: str, peer: Identity) -> None:
    """``user`` proves it holds ``peer``'s key (by asking for a pass for it)."""
    session = (await running.client.login(user))["session"]
    assert (await running.client.request_pass(session, peer)).status == 200


async def report(running: Running, items: list[Any]) -> dict[str, Any]:
    session = (await running.client.login("aux"))["session"]
    reply = await running.client.post("/evidence", {"evidence": items}, token=session)
    assert reply.status == 200, reply
    result: dict[str, Any] = reply.body
    return result


@pytest.fixture
async def people(coordinator: Running) -> dict[str, Identity]:
    """A moderator ``aux``, reporters alice (two devices) and bob, and mallory, all with keys."""
    keys = {name: Identity.generate() for name in ("alice", "alice2", "bob", "mallory", "banned")}
    coordinator.add_user("aux", moderator=True)
    for user in ("alice", "bob", "mallory", "banned"):
        coordinator.add_user(user)
    for user, key in (("alice", "alice"), ("alice", "alice2"), ("bob", "bob")):
        await prove(coordinator, user, keys[key])
    await prove(coordinator, "mallory", keys["mallory"])
    await prove(coordinator, "banned", keys["banned"])
    coordinator.service.store.ban("banned")
    return keys


async def test_only_moderators_may_report_evidence(coordinator: Running) -> None:
    coordinator.add_user("alice")
    session = (await coordinator.client.login("alice"))["session"]
    refused = await coordinator.client.post("/evidence", {"evidence": []}, token=session)
    assert (refused.status, refused.body["code"]) == (403, "forbidden")
    assert (await coordinator.client.post("/evidence", {"evidence": []})).status == 401


async def test_good_evidence_is_kept_and_the_rest_refused_with_reasons(
    coordinator: Running, people: dict[str, Identity]
) -> None:
    alice, bob, mallory = people["alice"], people["bob"], people["mallory"]
    good = accuse(coordinator, alice, mallory)
    stranger = Identity.generate()  # a fresh key no account proved
    now = coordinator.clock.time()
    items = [
        good.to_json(),
        accuse(coordinator, bob, mallory).to_json(),
        {**accuse(coordinator, alice, mallory, part=1).to_json(), "value": 1.0},  # altered
        dataclasses.replace(accuse(coordinator, mallory, bob), reporter=alice.peer_id).to_json(),
        accuse(coordinator, alice, mallory, project="elsewhere").to_json(),
        accuse(coordinator, stranger, mallory).to_json(),
        accuse(coordinator, people["banned"], mallory).to_json(),
        accuse(coordinator, alice, mallory, part=2, time=now - 3 * 86400).to_json(),
        accuse(coordinator, alice, mallory, part=3, time=now + 7200).to_json(),
        {**accuse(coordinator, alice, mallory, part=4).to_json(), "reason": "\x1b[2Jwiped"},
        good.to_json(),  # twice in one report
        "not an object",
    ]
    result = await report(coordinator, items)
    assert (result["accepted"], result["new"]) == (2, 2)
    reasons = [r["reason"] for r in result["rejected"]]
    assert len(reasons) == 10
    assert "not signed by its reporter" in reasons[0]
    assert "not signed by its reporter" in reasons[1]
    assert "project 'elsewhere'" in reasons[2]
    assert "no account here proved" in reasons[3]
    assert "'banned' is banned" in reasons[4]
    assert "older than" in reasons[5]
    assert "in the future" in reasons[6]
    assert "reason must be printable" in reasons[7]
    assert "twice" in reasons[8]
    assert "JSON object" in reasons[9]
    assert result["rejected"][0]["accused"] == str(mallory.peer_id)
    assert result["rejected"][9] == {"reporter": "", "accused": "", "reason": reasons[9]}
    # sent again (a retried report): accepted, counted once
    again = await report(coordinator, [good.to_json()])
    assert (again["accepted"], again["new"]) == (1, 0)
    (accused,) = coordinator.service.store.evidence.accused()
    assert (accused.username, accused.findings, accused.reporters) == ("mallory", 2, 2)


async def test_reporters_are_counted_by_account_and_bounded(
    coordinator: Running, people: dict[str, Identity], monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, alice2, mallory = people["alice"], people["alice2"], people["mallory"]
    monkeypatch.setattr(judging, "MAX_PER_HOUR", 3)
    first = await report(coordinator, [accuse(coordinator, alice, mallory, part=p).to_json()
                                       for p in range(2)])  # fmt: skip
    assert first["accepted"] == 2
    # alice's second device is the same voice, and her budget is the account's
    second = await report(coordinator, [accuse(coordinator, alice2, mallory, part=p).to_json()
                                        for p in range(2)])  # fmt: skip
    assert second["accepted"] == 1
    assert "more than 3 in an hour" in second["rejected"][0]["reason"]
    (accused,) = coordinator.service.store.evidence.accused()
    assert (accused.findings, accused.reporters, accused.reporter_peers) == (3, 1, 2)
    coordinator.clock.advance(3601)
    later = accuse(coordinator, alice, mallory, part=7)
    assert (await report(coordinator, [later.to_json()]))["accepted"] == 1
    # a report as a whole is bounded
    session = (await coordinator.client.login("aux"))["session"]
    too_many = {"evidence": [later.to_json()] * (EVIDENCE.most + 1)}
    refused = await coordinator.client.post("/evidence", too_many, token=session)
    assert refused.status == 400
    assert "at most 256" in refused.body["error"]
    not_a_list = await coordinator.client.post("/evidence", {"evidence": {}}, token=session)
    assert not_a_list.status == 400


async def test_banning_the_accused_account_revokes_its_peer(
    coordinator: Running, people: dict[str, Identity], tmp_path: Path
) -> None:
    mallory = people["mallory"]
    await report(coordinator, [accuse(coordinator, people["alice"], mallory).to_json()])
    before = (await coordinator.client.get("/revocations")).body["revoked"]
    assert before == [str(people["banned"].peer_id)]
    # the moderator's command opens its own store on the same file, as ``reports ban`` does
    with CoordinatorStore(coordinator.service.db_path) as store:
        key = store.peer_keys.owner(str(mallory.peer_id))
        assert key is not None
        store.ban("mallory", "accused of sending huge gradients")
        (accused,) = store.evidence.accused()
        assert accused.banned
    revoked = (await coordinator.client.get("/revocations")).body["revoked"]
    assert sorted(revoked) == sorted([*before, str(mallory.peer_id)])


def test_a_schema_2_file_gets_the_evidence_table(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    old = SqliteFile("coordinator database", APPLICATION_ID, _MIGRATIONS[:2], StoreError)
    old.open(path).close()
    with CoordinatorStore(path) as store:
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert store.evidence.accused() == []
