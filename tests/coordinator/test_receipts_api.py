"""``POST /receipts``: trainers' signed receipts for an expert server's work, credited to the
server's owner once per running total, refused with a reason when they prove nothing; the
leaderboard's ``expert_samples`` and the audit's queries."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from core.coordinator.reports import receipts as receipts_module
from core.net import Identity
from core.trust.receipts import Receipt, sign_receipt
from tests.coordinator.conftest import PROJECT, Running
from tests.coordinator.test_leaderboard_api import entry, pass_for, report

SESSION = bytes(range(16))


def receipt(
    trainer: Identity,
    server: Identity,
    forward: int,
    backward: int,
    *,
    sequence: int = 1,
    session: bytes = SESSION,
    project: str = PROJECT,
) -> Receipt:
    return sign_receipt(
        trainer,
        project,
        server.peer_id,
        session=session,
        sequence=sequence,
        forward_samples=forward,
        backward_samples=backward,
    )


async def post(running: Running, user: str, items: list[Any]) -> dict[str, Any]:
    session = (await running.client.login(user))["session"]
    body = [r.to_json() if isinstance(r, Receipt) else r for r in items]
    reply = await running.client.post("/receipts", {"receipts": body}, token=session)
    assert reply.status == 200, reply
    result: dict[str, Any] = reply.body
    return result


async def volunteers(running: Running) -> tuple[Identity, Identity]:
    """alice's expert server and bob's trainer, each key proved by its account."""
    for name in ("alice", "bob", "mallory"):
        running.add_user(name)
    server, trainer = Identity.generate(), Identity.generate()
    await pass_for(running, "alice", server)
    await pass_for(running, "bob", trainer)
    return server, trainer


async def test_running_totals_are_credited_once_and_then_by_their_growth(
    coordinator: Running,
) -> None:
    server, trainer = await volunteers(coordinator)
    first = receipt(trainer, server, 60, 40, sequence=1)
    answer = await post(coordinator, "alice", [first])
    assert (answer["accepted"], answer["credited"], answer["rejected"]) == (1, 100, [])
    again = await post(coordinator, "alice", [first])  # a retry: nothing more
    assert (again["accepted"], again["credited"]) == (1, 0)

    newer = receipt(trainer, server, 90, 70, sequence=5)
    assert (await post(coordinator, "alice", [newer]))["credited"] == 60
    # an older receipt after a newer, and a newer one vouching for less, add nothing
    older = receipt(trainer, server, 80, 60, sequence=3)
    smaller = receipt(trainer, server, 10, 10, sequence=9)
    assert (await post(coordinator, "alice", [older, smaller, newer]))["credited"] == 0
    # another session of the same trainer has its own totals
    other = receipt(trainer, server, 5, 5, session=bytes(16))
    assert (await post(coordinator, "alice", [other]))["credited"] == 10

    board = (await coordinator.client.get("/leaderboard")).body
    assert [(u["username"], u["samples"], u["expert_samples"]) for u in board["users"]] == [
        ("alice", 170, 170)
    ]
    assert board["totals"]["epochs"] == 0  # the reported epochs are not touched
    session = (await coordinator.client.login("alice"))["session"]
    me = (await coordinator.client.get("/leaderboard/me", token=session)).body
    assert (me["rank"], me["samples"], me["expert_samples"]) == (1, 170, 170)
    assert (me["history"]["7d"][-1]["samples"], me["history"]["7d"][-1]["expert_samples"]) == (
        170,
        170,
    )

    store = coordinator.service.store
    assert store.receipts.credited_by_user() == [
        {
            "username": "alice",
            "expert_samples": 170,
            "receipts": 3,
            "sessions": 2,
            "vouching_accounts": 1,
        }
    ]
    assert store.receipts.failing(PROJECT) == []
    # the rows keep the newest signed receipt of each session: anyone can check it again
    signed = store._conn.execute("SELECT signed FROM receipts ORDER BY credited DESC").fetchone()[0]
    assert Receipt.from_bytes(signed) == newer


async def test_expert_samples_rank_with_trained_samples(coordinator: Running) -> None:
    server, trainer = await volunteers(coordinator)
    coordinator.add_user("aux", moderator=True)
    peer = Identity.generate()
    await report(coordinator, 1, [entry(peer, await pass_for(coordinator, "bob", peer), 150)])
    await post(coordinator, "alice", [receipt(trainer, server, 100, 100)])
    board = (await coordinator.client.get("/leaderboard")).body
    ranked = [(u["username"], u["samples"], u["expert_samples"]) for u in board["users"]]
    assert ranked == [("alice", 200, 200), ("bob", 150, 0)]
    assert board["totals"]["samples"] == 350
    assert board["totals"]["expert_samples"] == 200


async def test_receipts_that_prove_nothing_are_refused_with_their_reason(
    coordinator: Running,
) -> None:
    server, trainer = await volunteers(coordinator)
    own_trainer, stranger, banned = Identity.generate(), Identity.generate(), Identity.generate()
    await pass_for(coordinator, "alice", own_trainer)
    coordinator.add_user("carol")
    await pass_for(coordinator, "carol", banned)
    coordinator.service.store.ban("carol")
    good = receipt(trainer, server, 10, 10)
    self_signed = {**good.to_json(), "trainer": str(server.peer_id)}
    cases: list[tuple[object, str]] = [
        (receipt(trainer, server, 10, 10, project="elsewhere"), "for project 'elsewhere'"),
        (dataclasses.replace(good, signature=server.sign(good.payload())), "not signed by"),
        (self_signed, "its own experts"),
        (receipt(own_trainer, server, 10, 10), "poster's own account"),
        (receipt(stranger, server, 10, 10), "no account here proved it holds the trainer's key"),
        (receipt(banned, server, 10, 10), "trainer's account is banned"),
        ({"format": "nonsense"}, "format"),
        ("not an object", "JSON object"),
    ]
    answer = await post(coordinator, "alice", [item for item, _ in cases])
    assert (answer["accepted"], answer["credited"]) == (0, 0)
    reasons = [r["reason"] for r in answer["rejected"]]
    assert len(reasons) == len(cases)
    for reason, (_, why) in zip(reasons, cases, strict=True):
        assert why in reason
    assert answer["rejected"][0]["server"] == str(server.peer_id)

    # a server's receipts count only for the account that proved the server's key
    stolen = await post(coordinator, "mallory", [good])
    assert stolen["accepted"] == 0
    assert "server's key" in stolen["rejected"][0]["reason"]
    assert (await coordinator.client.get("/leaderboard")).body["users"] == []

    # not logged in, or a report that is not one
    assert (await coordinator.client.post("/receipts", {"receipts": []})).status == 401
    session = (await coordinator.client.login("alice"))["session"]
    too_many = {"receipts": [good.to_json()] * 257}
    for body in ({"receipts": "x"}, too_many):
        assert (await coordinator.client.post("/receipts", body, token=session)).status == 400


async def test_an_account_opens_only_so_many_sessions_an_hour(
    coordinator: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(receipts_module, "MAX_NEW_PER_HOUR", 2)
    server, trainer = await volunteers(coordinator)
    sessions = [bytes([n] * 16) for n in range(3)]
    answer = await post(
        coordinator, "alice", [receipt(trainer, server, 1, 1, session=s) for s in sessions]
    )
    assert (answer["accepted"], answer["credited"]) == (2, 4)
    assert "in an hour" in answer["rejected"][0]["reason"]
    # known sessions still grow; after the hour, new ones open again
    grown = receipt(trainer, server, 5, 5, session=sessions[0], sequence=2)
    assert (await post(coordinator, "alice", [grown]))["credited"] == 8
    coordinator.clock.advance(3601.0)
    assert (
        await post(coordinator, "alice", [receipt(trainer, server, 1, 1, session=sessions[2])])
    )["credited"] == 2


async def test_the_audit_finds_receipts_that_no_longer_check(coordinator: Running) -> None:
    server, trainer = await volunteers(coordinator)
    await post(coordinator, "alice", [receipt(trainer, server, 3, 4)])
    store = coordinator.service.store
    assert store.receipts.failing(PROJECT) == []
    assert store.receipts.failing("another project")[0]["reason"].startswith("the receipt is for")
    # a row whose figures were changed by hand no longer matches its signed receipt
    with store._conn:
        store._conn.execute("UPDATE receipts SET forward_samples = 300, credited = 304")
    failed = store.receipts.failing(PROJECT)
    assert [(f["username"], f["trainer"]) for f in failed] == [("alice", str(trainer.peer_id))]
    assert "not the one its row describes" in failed[0]["reason"]
    # a signature damaged in the file
    forged = dataclasses.replace(receipt(trainer, server, 3, 4), signature=bytes(64))
    with store._conn:
        store._conn.execute(
            "UPDATE receipts SET forward_samples = 3, credited = 7, signed = ?",
            (forged.to_bytes(),),
        )
    assert "not signed by" in store.receipts.failing(PROJECT)[0]["reason"]
    store.start_new_leaderboard()
    assert store.receipts.credited_by_user() == []
