"""Contribution reports from the backbone, and the leaderboard built from them."""

from __future__ import annotations

import datetime
from typing import Any

from core.net import Identity
from core.trust.passes import issue_pass, pass_to_text
from tests.coordinator.conftest import PROJECT, Running

DAY = 86400.0


async def pass_for(running: Running, user: str, peer: Identity) -> str:
    session = (await running.client.login(user))["session"]
    reply = await running.client.request_pass(session, peer)
    assert reply.status == 200, reply
    text: str = reply.body["pass"]
    return text


def entry(peer: Identity, access: str, samples: int, compute: float = 1.5) -> dict[str, Any]:
    return {
        "peer": str(peer.peer_id),
        "pass": access,
        "samples": samples,
        "compute_seconds": compute,
    }


async def report(
    running: Running, epoch: int, entries: list[dict[str, Any]], *, time: float | None = None
) -> dict[str, Any]:
    session = (await running.client.login("aux"))["session"]
    body = {
        "epoch": epoch,
        "time": running.clock.time() if time is None else time,
        "samples": sum(e["samples"] for e in entries if isinstance(e, dict)),
        "contributions": entries,
    }
    reply = await running.client.post("/contributions", body, token=session)
    assert reply.status == 200, reply
    result: dict[str, Any] = reply.body
    return result


async def test_only_moderators_may_report(coordinator: Running) -> None:
    coordinator.add_user("alice")
    session = (await coordinator.client.login("alice"))["session"]
    body = {"epoch": 1, "time": coordinator.clock.time(), "samples": 0, "contributions": []}
    refused = await coordinator.client.post("/contributions", body, token=session)
    assert refused.status == 403
    assert "moderator" in refused.body["error"]
    assert (await coordinator.client.post("/contributions", body)).status == 401


async def test_only_passes_of_the_contributing_peer_count(coordinator: Running) -> None:
    coordinator.add_user("aux", moderator=True)
    coordinator.add_user("alice")
    coordinator.add_user("mallory")
    alice_peer, mallory_peer = Identity.generate(), Identity.generate()
    alice_pass = await pass_for(coordinator, "alice", alice_peer)
    mallory_pass = await pass_for(coordinator, "mallory", mallory_peer)
    now = coordinator.clock.time()
    forger = Identity.generate()
    forged = pass_to_text(
        issue_pass(forger, PROJECT, "mallory", mallory_peer.peer_id, issued=now, lifetime=600)
    )
    elsewhere = pass_to_text(
        issue_pass(
            coordinator.key, "other", "mallory", mallory_peer.peer_id, issued=now, lifetime=60
        )
    )
    ghost = pass_to_text(
        issue_pass(coordinator.key, PROJECT, "ghost", mallory_peer.peer_id, issued=now, lifetime=60)
    )
    result = await report(
        coordinator,
        1,
        [
            entry(alice_peer, alice_pass, 100),
            entry(mallory_peer, forged, 1000),  # signed by someone else
            entry(mallory_peer, alice_pass, 1000),  # alice's pass shown by mallory's peer
            entry(mallory_peer, elsewhere, 1000),  # another project's
            entry(mallory_peer, ghost, 1000),  # a user who does not exist
            entry(mallory_peer, "garbage", 1000),
            {**entry(mallory_peer, mallory_pass, 1000), "samples": -5},
            {**entry(mallory_peer, mallory_pass, 1000), "compute_seconds": "lots"},
            "not an object",
        ],
    )
    assert result["accepted"] == 1
    reasons = [r["reason"] for r in result["rejected"]]
    assert len(reasons) == 8
    assert "not signed by the project key" in reasons[0]
    assert "another peer key" in reasons[1]
    assert "project" in reasons[2]
    assert "no account" in reasons[3]
    assert "malformed access pass" in reasons[4]
    assert "samples" in reasons[5]
    assert "compute_seconds" in reasons[6]
    assert result["rejected"][7]["peer"] == ""
    assert all(r["peer"] == str(mallory_peer.peer_id) for r in result["rejected"][:7])
    board = (await coordinator.client.get("/leaderboard")).body
    assert [(u["username"], u["samples"]) for u in board["users"]] == [("alice", 100)]


async def test_expired_passes_are_forgiven_for_one_lifetime_only(coordinator: Running) -> None:
    coordinator.add_user("aux", moderator=True)
    coordinator.add_user("alice")
    peer = Identity.generate()
    access = await pass_for(coordinator, "alice", peer)  # expires after 600 s
    issued = coordinator.clock.time()
    coordinator.clock.advance(1150.0)
    late = await report(coordinator, 1, [entry(peer, access, 10)], time=issued + 1150.0)
    assert late["accepted"] == 1
    too_late = await report(coordinator, 2, [entry(peer, access, 10)], time=issued + 1250.0)
    assert too_late["accepted"] == 0
    assert "expired" in too_late["rejected"][0]["reason"]
    banned = await pass_for(coordinator, "alice", peer)
    coordinator.service.store.ban("alice")
    refused = await report(coordinator, 3, [entry(peer, banned, 10)])
    assert "banned" in refused["rejected"][0]["reason"]


async def test_a_report_sent_twice_counts_once(coordinator: Running) -> None:
    coordinator.add_user("aux", moderator=True)
    coordinator.add_user("alice")
    peer = Identity.generate()
    access = await pass_for(coordinator, "alice", peer)
    first = await report(coordinator, 7, [entry(peer, access, 64, 2.0)])
    again = await report(coordinator, 7, [entry(peer, access, 64, 2.0)])
    assert first == again == {"accepted": 1, "rejected": []}
    twice = await report(coordinator, 8, [entry(peer, access, 32), entry(peer, access, 32)])
    assert twice["accepted"] == 1
    assert "twice" in twice["rejected"][0]["reason"]
    board = (await coordinator.client.get("/leaderboard")).body
    assert board["users"][0]["samples"] == 64 + 32
    assert board["users"][0]["compute_seconds"] == 2.0 + 1.5
    assert board["totals"] == {
        "samples": 96,
        "expert_samples": 0,
        "compute_seconds": 3.5,
        "users": 1,
        "epochs": 2,
    }


async def test_malformed_reports_are_refused_whole(coordinator: Running) -> None:
    coordinator.add_user("aux", moderator=True)
    session = (await coordinator.client.login("aux"))["session"]
    now = coordinator.clock.time()
    good = {"epoch": 1, "time": now, "samples": 0, "contributions": []}
    for broken in [
        {**good, "epoch": -1},
        {**good, "epoch": True},
        {**good, "time": "yesterday"},
        {**good, "time": now + 10 * DAY},
        {**good, "samples": 1.5},
        {**good, "contributions": {}},
    ]:
        reply = await coordinator.client.post("/contributions", broken, token=session)
        assert reply.status == 400, broken
    huge = {**good, "contributions": ["x" * 1000] * 1100}
    assert (await coordinator.client.post("/contributions", huge, token=session)).status == 413


async def test_leaderboard_ranks_totals_devices_and_leaves_out_the_banned(
    coordinator: Running,
) -> None:
    coordinator.add_user("aux", moderator=True)
    for name in ("alice", "Bob", "carol", "mallory"):
        coordinator.add_user(name)
    alice_a, alice_b, bob, carol, mallory = (Identity.generate() for _ in range(5))
    passes = {
        "alice_a": await pass_for(coordinator, "alice", alice_a),
        "alice_b": await pass_for(coordinator, "alice", alice_b),
        "bob": await pass_for(coordinator, "bob", bob),
        "carol": await pass_for(coordinator, "carol", carol),
        "mallory": await pass_for(coordinator, "mallory", mallory),
    }
    start = coordinator.clock.time()
    await report(
        coordinator,
        1,
        [
            entry(alice_a, passes["alice_a"], 30, 10.0),
            entry(bob, passes["bob"], 50, 20.0),
            entry(carol, passes["carol"], 50, 5.0),
            entry(mallory, passes["mallory"], 500, 1.0),
        ],
    )
    coordinator.clock.advance(1000.0)  # over 15 minutes: those devices are no longer active
    await report(coordinator, 2, [entry(alice_b, passes["alice_b"], 20, 4.0)])
    coordinator.service.store.ban("mallory")

    board = (await coordinator.client.get("/leaderboard")).body
    assert board["time"] == start + 1000.0
    rows = [
        (u["rank"], u["username"], u["samples"], u["active_devices"], u["devices"])
        for u in board["users"]
    ]
    # ties by samples go to the username (case-folded): alice < bob < carol
    assert rows == [(1, "alice", 50, 1, 2), (2, "Bob", 50, 0, 1), (3, "carol", 50, 0, 1)]
    assert board["users"][0]["compute_seconds"] == 14.0
    assert board["users"][0]["last_seen"] == start + 1000.0
    assert board["users"][1]["last_seen"] == start
    # the collaboration's totals still include the banned user's work (they reconcile with the
    # epochs' samples); only the list leaves them out
    assert board["totals"] == {
        "samples": 650,
        "expert_samples": 0,
        "compute_seconds": 40.0,
        "users": 3,
        "epochs": 2,
    }

    top = (await coordinator.client.get("/leaderboard?limit=2")).body
    assert [u["username"] for u in top["users"]] == ["alice", "Bob"]
    for bad in ["0", "1001", "-3", "ten", "1e3", "٣"]:
        assert (await coordinator.client.get(f"/leaderboard?limit={bad}")).status == 400, bad


async def test_me_shows_rank_percentile_neighbours_and_daily_history(coordinator: Running) -> None:
    coordinator.add_user("aux", moderator=True)
    names = ["u1", "u2", "u3", "u4", "u5", "u6"]
    for name in names:
        coordinator.add_user(name)
    coordinator.add_user("newcomer")
    peers = {name: Identity.generate() for name in names}
    clock = coordinator.clock
    first_day = clock.time()
    # u3 contributes on three days: 10 days ago, 2 days ago and today; the others once, today
    for epoch, days_ago in enumerate((10, 2)):
        coordinator.clock.advance(0 if epoch == 0 else (10 - days_ago) * DAY)
        access = await pass_for(coordinator, "u3", peers["u3"])
        await report(coordinator, epoch, [entry(peers["u3"], access, 100, 60.0)])
    clock.advance(2 * DAY)
    today = clock.time()
    entries = [
        entry(peers[name], await pass_for(coordinator, name, peers[name]), samples, 1.0)
        for name, samples in zip(names, (900, 700, 100, 250, 200, 100), strict=True)
    ]
    await report(coordinator, 5, entries)

    session = (await coordinator.client.login("u3"))["session"]
    me = (await coordinator.client.get("/leaderboard/me", token=session)).body
    assert (me["username"], me["rank"], me["samples"], me["compute_seconds"]) == (
        "u3",
        3,
        300,
        121.0,
    )
    assert me["percentile"] == round(100 * 4 / 6, 1)
    assert [(n["rank"], n["username"]) for n in me["above"]] == [(1, "u1"), (2, "u2")]
    assert [(n["rank"], n["username"]) for n in me["below"]] == [(4, "u4"), (5, "u5")]
    assert set(me["above"][0]) == {
        "rank",
        "username",
        "samples",
        "expert_samples",
        "compute_seconds",
        "active_devices",
        "devices",
        "last_seen",
    }

    week, month = me["history"]["7d"], me["history"]["30d"]
    assert len(week) == 7
    assert len(month) == 30
    day = datetime.datetime.fromtimestamp(today, datetime.UTC).date()
    assert [d["day"] for d in week] == [
        (day - datetime.timedelta(days=6 - i)).isoformat() for i in range(7)
    ]
    assert [d["samples"] for d in week] == [0, 0, 0, 0, 100, 0, 100]
    assert month[-11]["samples"] == 100  # ten days ago
    assert (
        month[-11]["day"]
        == datetime.datetime.fromtimestamp(first_day, datetime.UTC).date().isoformat()
    )
    assert sum(d["samples"] for d in month) == 300
    assert sum(d["compute_seconds"] for d in month) == 121.0

    # the last ranked user has no one below; the first has no one above
    last = (await coordinator.client.login("u6"))["session"]
    bottom = (await coordinator.client.get("/leaderboard/me", token=last)).body
    assert (bottom["rank"], bottom["percentile"], bottom["below"]) == (6, round(100 / 6, 1), [])
    assert [n["username"] for n in bottom["above"]] == ["u4", "u5"]

    fresh = (await coordinator.client.login("newcomer"))["session"]
    nothing = (await coordinator.client.get("/leaderboard/me", token=fresh)).body
    assert (nothing["rank"], nothing["percentile"], nothing["samples"]) == (None, None, 0)
    assert nothing["above"] == nothing["below"] == []
    assert all(d["samples"] == 0 for d in nothing["history"]["30d"])
    assert (await coordinator.client.get("/leaderboard/me")).status == 401


async def test_a_late_report_adds_its_new_contributions_to_the_epoch_once(
    coordinator: Running,
) -> None:
    coordinator.add_user("aux", moderator=True)
    coordinator.add_user("alice")
    coordinator.add_user("bob")
    alice, bob = Identity.generate(), Identity.generate()
    alice_pass = await pass_for(coordinator, "alice", alice)
    bob_pass = await pass_for(coordinator, "bob", bob)
    session = (await coordinator.client.login("aux"))["session"]
    now = coordinator.clock.time()
    figures = {"loss": 2.5, "samples_per_second": 40.0, "alive_peers": 2}
    first = {"epoch": 4, "time": now, "samples": 64, **figures,
             "contributions": [entry(alice, alice_pass, 64)]}  # fmt: skip
    assert (await coordinator.client.post("/contributions", first, token=session)).status == 200
    # bob's record of epoch 4 was read after the epoch went out; alice's share comes along again
    late = {"epoch": 4, "time": now + 5, "samples": 96, "late": True,
            "contributions": [entry(alice, alice_pass, 64), entry(bob, bob_pass, 32)]}  # fmt: skip
    for _ in range(2):
        reply = await coordinator.client.post("/contributions", late, token=session)
        assert reply.status == 200, reply
    contributions = coordinator.service.store.contributions
    assert contributions.epoch_totals() == (1, 96)
    board = (await coordinator.client.get("/leaderboard")).body
    assert {u["username"]: u["samples"] for u in board["users"]} == {"alice": 64, "bob": 32}
    newest = coordinator.service.store.figures.latest()
    assert newest is not None
    assert newest.figures.loss == 2.5  # a late report carries no figures
    broken = {**late, "late": "yes"}
    assert (await coordinator.client.post("/contributions", broken, token=session)).status == 400


async def test_a_late_report_of_an_epoch_never_reported_counts_only_its_shares(
    coordinator: Running,
) -> None:
    coordinator.add_user("aux", moderator=True)
    coordinator.add_user("alice")
    alice = Identity.generate()
    access = await pass_for(coordinator, "alice", alice)
    session = (await coordinator.client.login("aux"))["session"]
    late = {"epoch": 9, "time": coordinator.clock.time(), "samples": 999, "late": True,
            "contributions": [entry(alice, access, 48)]}  # fmt: skip
    assert (await coordinator.client.post("/contributions", late, token=session)).status == 200
    assert coordinator.service.store.contributions.epoch_totals() == (1, 48)


async def test_a_withdrawal_takes_a_caught_peers_credit_back_once_and_refuses_bad_bodies(
    coordinator: Running,
) -> None:
    coordinator.add_user("aux", moderator=True)
    coordinator.add_user("alice")
    coordinator.add_user("mallory")
    alice, mallory = Identity.generate(), Identity.generate()
    alice_pass = await pass_for(coordinator, "alice", alice)
    mallory_pass = await pass_for(coordinator, "mallory", mallory)
    session = (await coordinator.client.login("aux"))["session"]
    now = coordinator.clock.time()
    for epoch in (4, 5):
        parts = [entry(alice, alice_pass, 64), entry(mallory, mallory_pass, 32)]
        body = {"epoch": epoch, "time": now + epoch, "samples": 96, "contributions": parts}
        assert (await coordinator.client.post("/contributions", body, token=session)).status == 200
    # the backbone caught mallory faking work after epoch 4 was vouched for: epoch 5 is taken back
    withdrawal = {"epoch": 5, "time": now + 9, "samples": 32, "withdrawn": True,
                  "contributions": [entry(mallory, mallory_pass, 32)]}  # fmt: skip
    answers = []
    for _ in range(2):
        reply = await coordinator.client.post("/contributions", withdrawal, token=session)
        assert reply.status == 200, reply
        answers.append(reply.body["withdrawn"])
    assert answers == [32, 0]  # sent twice, taken once
    board = (await coordinator.client.get("/leaderboard")).body
    assert {u["username"]: u["samples"] for u in board["users"]} == {"alice": 128, "mallory": 32}
    assert coordinator.service.store.contributions.epoch_totals() == (2, 96 + 64)
    mine = (await coordinator.client.login("mallory"))["session"]
    me = (await coordinator.client.get("/leaderboard/me", token=mine)).body
    assert me["samples"] == 32
    assert sum(d["samples"] for d in me["history"]["30d"]) == 32
    # a withdrawal is no late credit, and only a moderator sends one
    both = {**withdrawal, "late": True}
    assert (await coordinator.client.post("/contributions", both, token=session)).status == 400
    odd = {**withdrawal, "withdrawn": "yes"}
    assert (await coordinator.client.post("/contributions", odd, token=session)).status == 400
    assert (await coordinator.client.post("/contributions", withdrawal, token=mine)).status == 403
