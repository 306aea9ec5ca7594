"""``GET /credit/mine``: what one of the caller's own peer keys was credited, epoch by epoch, late
reports included; another account's key is refused, and bad input is a 400."""

from __future__ import annotations

from urllib.parse import quote

from core.coordinator.reports.records import WITHDRAWN_NOTE
from core.net import Identity
from tests.coordinator.conftest import Running
from tests.coordinator.test_leaderboard_api import entry, pass_for, report


def path(peer: Identity | str, since: int | str | None = None) -> str:
    text = peer if isinstance(peer, str) else str(peer.peer_id)
    tail = "" if since is None else f"&since={quote(str(since))}"
    return f"/credit/mine?peer={quote(text)}{tail}"


async def test_own_key_shows_its_epochs_late_ones_included(coordinator: Running) -> None:
    coordinator.add_user("aux", moderator=True)
    coordinator.add_user("alice")
    coordinator.add_user("bob")
    alice, bob = Identity.generate(), Identity.generate()
    alice_pass = await pass_for(coordinator, "alice", alice)
    bob_pass = await pass_for(coordinator, "bob", bob)
    session = (await coordinator.client.login("alice"))["session"]

    before = await coordinator.client.get(path(alice), token=session)
    assert before.status == 200, before
    assert before.body == {
        "peer": str(alice.peer_id),
        "samples": 0,
        "epochs": [],
        "newest_epoch": None,
        "notes": [],
    }

    await report(coordinator, 1, [entry(alice, alice_pass, 64), entry(bob, bob_pass, 32)])
    await report(coordinator, 2, [entry(alice, alice_pass, 48)])
    await report(coordinator, 3, [entry(bob, bob_pass, 40)])
    # alice's share of epoch 3 was read after the epoch went out: a late report credits it
    aux = (await coordinator.client.login("aux"))["session"]
    late = {"epoch": 3, "time": coordinator.clock.time(), "samples": 16, "late": True,
            "contributions": [entry(alice, alice_pass, 16)]}  # fmt: skip
    assert (await coordinator.client.post("/contributions", late, token=aux)).status == 200

    mine = await coordinator.client.get(path(alice, 0), token=session)
    assert mine.status == 200, mine
    assert mine.body == {
        "peer": str(alice.peer_id),
        "samples": 64 + 48 + 16,
        "epochs": [[1, 64], [2, 48], [3, 16]],
        "newest_epoch": 3,
        "notes": [],
    }
    recent = (await coordinator.client.get(path(alice, 2), token=session)).body
    assert recent["epochs"] == [[2, 48], [3, 16]]
    assert recent["samples"] == 128  # the total is over every epoch
    assert (await coordinator.client.get(path(alice), token=session)).body == mine.body
    beyond = (await coordinator.client.get(path(alice, 99), token=session)).body
    assert (beyond["epochs"], beyond["newest_epoch"]) == ([], 3)
    # the same over the store, with a small limit: the oldest from since come first
    credit = coordinator.service.store.peer_credit.of(str(alice.peer_id), 0, limit=2)
    assert credit.epochs == [(1, 64), (2, 48)]


async def test_a_share_the_checks_cut_or_withdrew_says_what_was_claimed_and_why(
    coordinator: Running,
) -> None:
    coordinator.add_user("aux", moderator=True)
    coordinator.add_user("alice")
    alice = Identity.generate()
    alice_pass = await pass_for(coordinator, "alice", alice)
    session = (await coordinator.client.login("alice"))["session"]
    cut = entry(alice, alice_pass, 25) | {"claimed": 100, "note": "cut to the weight its round saw"}
    await report(coordinator, 1, [cut])
    await report(coordinator, 2, [entry(alice, alice_pass, 48)])
    await report(coordinator, 3, [entry(alice, alice_pass, 40)])
    aux = (await coordinator.client.login("aux"))["session"]
    # the backbone says why it takes a share back (with what was claimed: a share paid as
    # claimed claimed its samples); a withdrawal that gives no reason (an older backbone) gets
    # the general note
    unreached = "a work check of this peer could not reach it while it kept that work"
    reasoned = entry(alice, alice_pass, 48) | {"claimed": 48, "note": unreached}
    for epoch, part in ((2, reasoned), (3, entry(alice, alice_pass, 40))):
        withdrawal = {"epoch": epoch, "time": coordinator.clock.time(), "samples": part["samples"],
                      "withdrawn": True, "contributions": [part]}  # fmt: skip
        answer = await coordinator.client.post("/contributions", withdrawal, token=aux)
        assert answer.status == 200, answer
        assert not answer.body["rejected"], answer
    mine = (await coordinator.client.get(path(alice, 0), token=session)).body
    assert mine["epochs"] == [[1, 25], [2, 0], [3, 0]]
    assert mine["notes"] == [
        [1, 100, "cut to the weight its round saw"],
        [2, 48, f"withdrawn: {unreached}"],
        [3, 40, WITHDRAWN_NOTE],
    ]
    # a claim below the credit, or a note with no claim, is refused alone
    bad = [
        entry(alice, alice_pass, 25) | {"claimed": 10, "note": "x"},
        entry(alice, alice_pass, 25) | {"note": "x"},
        entry(alice, alice_pass, 25) | {"claimed": 30, "note": "x" * 201},
        entry(alice, alice_pass, 25) | {"claimed": 30, "note": "a\nb"},
    ]
    for number, wrong in enumerate(bad, start=4):
        answer = await report(coordinator, number, [wrong])
        assert answer["rejected"], answer


async def test_another_accounts_key_is_refused(coordinator: Running) -> None:
    coordinator.add_user("alice")
    coordinator.add_user("bob")
    bob = Identity.generate()
    await pass_for(coordinator, "bob", bob)
    session = (await coordinator.client.login("alice"))["session"]
    refused = await coordinator.client.get(path(bob), token=session)
    assert refused.status == 403
    assert "not one this account proved" in refused.body["error"]
    nobodys = await coordinator.client.get(path(Identity.generate()), token=session)
    assert nobodys.status == 403
    assert (await coordinator.client.get(path(bob))).status == 401


async def test_bad_input_is_a_400(coordinator: Running) -> None:
    coordinator.add_user("alice")
    alice = Identity.generate()
    await pass_for(coordinator, "alice", alice)
    session = (await coordinator.client.login("alice"))["session"]
    for bad in ("-1", "1.5", "abc", "", "9" * 20, "99999999999999999999999", "１"):
        reply = await coordinator.client.get(path(alice, bad), token=session)
        assert reply.status == 400, bad
        assert "since" in reply.body["error"]
    for peer in ("not-a-peer", "12D3KooW" + "x" * 300):
        reply = await coordinator.client.get(path(peer, 0), token=session)
        assert reply.status == 400, peer
        assert "peer" in reply.body["error"]
    missing = await coordinator.client.get("/credit/mine?since=0", token=session)
    assert missing.status == 400
    assert "peer is missing" in missing.body["error"]
