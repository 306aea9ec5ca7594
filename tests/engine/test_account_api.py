"""Accounts through the control API and ``barnraise ctl``, against a real coordinator on loopback.

The engine's peer is replaced by a stand-in (building a real one needs a swarm and data), so these
tests see exactly what the runner hands the peer: the ``AccessGate`` holding a fresh pass.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from keyring.backends import fail

from core.account import AccountSession, CoordinatorClient, CredentialStore
from core.account.credentials import service_name
from core.api import (
    AccountChanged,
    AccountInfo,
    AttachRequest,
    Conflict,
    CoordinatorUnreachable,
    LoginRefused,
    LoginRequired,
    MyRank,
)
from core.cli.ctl.text import text
from core.engine.account import Account
from core.net import Identity
from core.trust.passes import pass_to_text
from core.trust.receipts import sign_receipt
from tests.account.coordinator import PASSWORD, PROJECT, Coordinator, running_coordinator
from tests.account.memory_keyring import MemoryKeyring
from tests.engine.standin import StandInPeer
from tests.support.engine import CtlRun, Running, until
from tests.support.leaks import poll_until

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"


@pytest.fixture
async def coordinator(tmp_path: Path) -> AsyncIterator[Coordinator]:
    async with running_coordinator(tmp_path) as running:
        running.add_user("alice")
        running.add_user("mod", moderator=True)
        yield running


async def test_login_leaderboard_and_logout_through_the_api(
    engine: Running, coordinator: Coordinator, tmp_path: Path
) -> None:
    client = engine.client
    await client.attach(AttachRequest(str(coordinator.manifest_file(tmp_path))))
    before = await client.account()
    assert (before.project, before.coordinator) == (PROJECT, coordinator.url)
    assert (before.logged_in, before.username, before.moderated) == (False, None, True)

    with pytest.raises(LoginRefused, match="wrong username or password"):
        await client.login("alice", "not the password")
    info = await client.login("alice", PASSWORD)
    assert (info.logged_in, info.username, info.error) == (True, "alice", None)
    # the session and refresh secrets are in the keyring, under the coordinator's URL
    ((service, _), value) = next(iter(engine.keyring.entries.items()))
    assert service == service_name(coordinator.url)
    saved = json.loads(value)
    assert saved["username"] == "alice"
    assert saved["refresh"]
    assert PASSWORD not in value
    events = engine.daemon.engine.events.recent()
    changes = [e.data.account for e in events if isinstance(e.data, AccountChanged)]
    assert changes[-1].logged_in
    assert changes[-1].username == "alice"

    await _contribute(coordinator, "alice", samples=96)
    board = await client.leaderboard(5)
    assert board.project == PROJECT
    assert [(u.rank, u.username, u.samples) for u in board.users] == [(1, "alice", 96)]
    assert board.totals.samples == 96
    mine = await client.my_rank()
    assert (mine.username, mine.rank, mine.samples, mine.percentile) == ("alice", 1, 96, 100.0)
    assert len(mine.history_7d) == 7
    assert len(mine.history_30d) == 30
    assert mine.history_7d[-1].samples == 96

    out = await client.logout()
    assert (out.logged_in, out.username) == (False, None)
    assert engine.keyring.entries == {}
    with pytest.raises(LoginRequired, match="barnraise ctl login"):
        await client.my_rank()

    await coordinator.service.close()
    with pytest.raises(CoordinatorUnreachable, match="does not answer"):
        await client.leaderboard()


async def test_a_moderated_project_waits_for_a_login_then_runs_with_a_pass(
    engine: Running, coordinator: Coordinator, tmp_path: Path, peers: list[StandInPeer]
) -> None:
    client = engine.client
    await client.attach(AttachRequest(str(coordinator.manifest_file(tmp_path))))
    await client.set_settings({"max_other_cpu_percent": 100, "cpu_when_in_use": "pause"})
    await client.start()
    waiting = await until(engine.client, lambda s: s.code == "login_required")
    assert waiting.state == "error"
    assert "barnraise ctl login" in waiting.reason
    assert peers == []  # no peer without a pass

    logged_in_at = time.time()
    await client.login("alice", PASSWORD)
    await until(engine.client, lambda s: s.state == "running")  # at once, not after the back-off
    (peer,) = peers
    gate = peer.settings.access
    assert gate is not None
    assert gate.own_pass is not None
    assert (gate.own_pass.username, gate.own_pass.peer) == ("alice", gate.me)
    assert gate.project_key == coordinator.key.peer_id
    account = await client.account()
    assert account.pass_expires == gate.own_pass.expires
    # a pass issued for this login, for the project's 12 s (not how much of them is left: a busy
    # machine may take seconds to get here)
    assert gate.own_pass.issued >= logged_in_at
    assert account.pass_expires == pytest.approx(gate.own_pass.issued + 12)

    await client.logout()  # the peer leaves: its pass is no longer ours to renew
    assert peer.closed
    await until(engine.client, lambda s: s.code == "login_required")
    assert (await client.account()).pass_expires is None


async def test_ctl_login_reads_the_password_from_stdin(
    engine: Running, coordinator: Coordinator, tmp_path: Path, ctl_run: CtlRun
) -> None:
    await engine.client.attach(AttachRequest(str(coordinator.manifest_file(tmp_path))))
    with pytest.raises(LoginRefused, match="wrong username or password"):
        await ctl_run("login", "--username", "alice", "--password-stdin", stdin="nope nope\n")
    out = await ctl_run("login", "--username", "alice", "--password-stdin", stdin=PASSWORD + "\n")
    assert out.startswith(f"logged in as alice at {coordinator.url}")
    assert PASSWORD not in out
    assert "logged in as alice" in await ctl_run("account")
    assert "(no contributions counted yet)" in await ctl_run("leaderboard", "--limit", "3")
    assert "alice: no contribution counted yet" in await ctl_run("leaderboard", "--me")
    assert "not logged in" in await ctl_run("logout")


async def test_projects_without_a_coordinator_have_no_accounts(engine: Running) -> None:
    client = engine.client
    assert (await client.account()).project is None
    with pytest.raises(Conflict, match="attach one first"):
        await client.login("alice", PASSWORD)
    await client.attach(AttachRequest(str(DEMO)))
    info = await client.account()
    assert (info.project, info.coordinator, info.logged_in) == ("barnraise-demo", None, False)
    with pytest.raises(Conflict, match="no coordinator"):
        await client.login("alice", PASSWORD)
    with pytest.raises(Conflict, match="no coordinator"):
        await client.leaderboard()


async def _contribute(coordinator: Coordinator, username: str, samples: int) -> None:
    """What the backbone does after an epoch: report a peer's samples with its pass."""
    key = Identity.generate()
    peer = key.peer_id
    async with CoordinatorClient(coordinator.url) as http:
        tokens = await http.login(username, PASSWORD)
        grant = await http.request_pass(tokens, peer, key.sign, project=PROJECT)
        moderator = AccountSession(http, await http.login("mod", PASSWORD))
        contribution = {
            "peer": str(peer),
            "pass": pass_to_text(grant.access),
            "samples": samples,
            "compute_seconds": 1.5,
        }
        report = {
            "epoch": 1,
            "time": time.time(),
            "samples": samples,
            "contributions": [contribution],
        }
        assert (await moderator.report_contributions(report))["accepted"] == 1


async def _credit_expert_work(coordinator: Coordinator, username: str, samples: int) -> None:
    """What an expert server's owner posts: a receipt signed by another account's trainer."""
    server, trainer = Identity.generate(), Identity.generate()
    async with CoordinatorClient(coordinator.url) as http:
        owner = AccountSession(http, await http.login(username, PASSWORD))
        await owner.request_pass(server.peer_id, server.sign, project=PROJECT)
        moderator = AccountSession(http, await http.login("mod", PASSWORD))
        await moderator.request_pass(trainer.peer_id, trainer.sign, project=PROJECT)
        receipt = sign_receipt(
            trainer,
            PROJECT,
            server.peer_id,
            session=bytes(16),
            sequence=1,
            forward_samples=samples // 2,
            backward_samples=samples - samples // 2,
        )
        answer = await owner.report_receipts({"receipts": [receipt.to_json()]})
        assert answer["credited"] == samples


async def test_expert_samples_reach_the_leaderboard_and_my_rank(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    account = Account(CredentialStore(MemoryKeyring()), on_change=lambda _: None)
    await account.select(coordinator.manifest_file(tmp_path))
    await account.login("alice", PASSWORD)
    await _contribute(coordinator, "alice", samples=96)
    await _credit_expert_work(coordinator, "alice", samples=50)
    board = await account.leaderboard(5)
    assert [(u.username, u.samples, u.expert_samples) for u in board.users] == [("alice", 146, 50)]
    assert (board.totals.samples, board.totals.expert_samples) == (146, 50)
    mine = await account.my_rank()
    assert (mine.username, mine.rank, mine.samples, mine.expert_samples) == ("alice", 1, 146, 50)
    await account.close()


def test_ctl_says_how_many_of_your_samples_your_expert_servers_computed() -> None:
    mine = MyRank("p", "alice", 1, 100.0, samples=12_000, compute_seconds=7200.0)
    assert text(mine).splitlines()[0] == (
        "alice: rank 1 (percentile 100) in p, 12,000 samples, 2.0 h of compute"
    )
    helped = dataclasses.replace(mine, expert_samples=4_500)
    assert text(helped).splitlines()[0] == (
        "alice: rank 1 (percentile 100) in p, 12,000 samples (4,500 by your expert servers), "
        "2.0 h of compute"
    )


async def test_renewed_secrets_reach_the_keyring_and_no_keyring_still_logs_in(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    manifest = coordinator.manifest_file(tmp_path)
    keyring = MemoryKeyring()
    seen: list[AccountInfo] = []
    account = Account(CredentialStore(keyring), on_change=seen.append)
    await account.select(manifest)
    await account.login("alice", PASSWORD)
    (entry,) = keyring.entries.values()
    assert account.session is not None
    tokens = account.session.tokens
    assert tokens is not None
    account.session.replace(dataclasses.replace(tokens, session="stale" * 9))
    assert (await account.my_rank()).username == "alice"  # renewed the session on the way
    await account.close()  # waits for the new secrets to be written
    (renewed,) = keyring.entries.values()
    assert json.loads(renewed)["refresh"] != json.loads(entry)["refresh"]
    # a new engine finds the renewed login
    again = Account(CredentialStore(keyring), on_change=seen.append)
    await again.select(manifest)
    assert again.info().username == "alice"
    assert (await again.my_rank()).username == "alice"
    await again.close()

    # without a usable keyring the login lasts until the engine stops, and says so
    nowhere = Account(CredentialStore(fail.Keyring()), on_change=seen.append)
    await nowhere.select(manifest)
    assert "no usable keyring" in (nowhere.info().error or "")
    info = await nowhere.login("alice", PASSWORD)
    assert info.logged_in
    assert info.error is not None
    assert info.error.startswith("logged in until the engine stops")
    assert "keyrings.alt" in info.error
    await nowhere.close()
    assert seen[-1] == info


async def test_whether_sign_up_is_open_comes_from_the_coordinator(
    engine: Running, tmp_path: Path
) -> None:
    async with running_coordinator(tmp_path / "open", allow_signup=True) as open_signup:
        # the volunteer's copy of the manifest says nothing about sign-up (so: closed)
        manifest = open_signup.manifest_file(tmp_path)
        assert "allow_signup = false" in manifest.read_text()
        await engine.client.attach(AttachRequest(str(manifest)))
        await poll_until(engine.client.account, lambda info: info.allow_signup)
        changes = [
            e.data.account
            for e in engine.daemon.engine.events.recent()
            if isinstance(e.data, AccountChanged)
        ]
        assert changes[-1].allow_signup  # the GUI hears of it without asking
        # an open project has no coordinator to ask: never open
        await engine.client.detach(PROJECT)
        await engine.client.attach(AttachRequest(str(DEMO)))
        assert not (await engine.client.account()).allow_signup
