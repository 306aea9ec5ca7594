"""Rollback orders at the coordinator: ``barnraise coordinator rollback`` signs and stores them,
refuses nonsense, ``GET /rollback`` serves the latest, and a peer's pass keeper reads it within one
refresh."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.account import AccountSession, CoordinatorClient, PassKeeper
from core.cli.main import main
from core.net import Identity
from core.net.host.gate import AccessGate
from core.trust.rollback import order_from_text, order_to_text, sign_order
from tests.account.coordinator import PASSWORD, running_coordinator
from tests.account.coordinator import PROJECT as ACCOUNT_PROJECT
from tests.coordinator.conftest import PROJECT, Running, manifest_text
from tests.support.leaks import assert_no_leaks, open_fd_count, wait_until


def files(tmp_path: Path, key: Identity, *, mode: str = "moderated") -> list[str]:
    """The arguments naming the manifest, database and key of the running coordinator."""
    manifest = tmp_path / f"{mode}.toml"
    manifest.write_text(manifest_text(str(key.peer_id), mode=mode))
    key_file = tmp_path / "project-key.pem"
    if not key_file.exists():
        key.save(key_file)
    return ["--manifest", str(manifest), "--db", str(tmp_path / "coordinator.db"), "--key",
            str(key_file)]  # fmt: skip


def in_diloco_mode(manifest: Path, copy: Path) -> Path:
    assert "[training]" not in manifest.read_text()
    copy.write_text(manifest.read_text() + '\n[training]\nmode = "diloco"\n')
    return copy


def rollback(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["coordinator", "rollback", *args])
    out, err = capsys.readouterr()
    return code, out, err


async def test_the_latest_signed_order_is_served_to_everyone(
    coordinator: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = files(tmp_path, coordinator.key)
    client = coordinator.client
    assert (await client.get("/rollback")).body == {"rollback": None}

    code, out, err = rollback(capsys, "--to-epoch", "3", "--reason", "loss exploded", *where)
    assert (code, err) == (0, "")
    assert out.startswith("rollback #1 to the checkpoint of epoch 3 signed and stored")
    reply = await client.get("/rollback")  # public, as the revocations are: no session needed
    assert reply.status == 200
    served = order_from_text(reply.body["rollback"])
    served.check(PROJECT, coordinator.key.peer_id)  # signed by the project key, for this project
    assert (served.sequence, served.to_epoch, served.reason) == (1, 3, "loss exploded")
    assert reply.body["sequence"] == 1
    assert reply.body["to_epoch"] == 3

    assert rollback(capsys, "--to-epoch", "0", *where)[0] == 0
    latest = order_from_text((await client.get("/rollback")).body["rollback"])
    assert (latest.sequence, latest.to_epoch, latest.reason) == (2, 0, "")
    code, out, _ = rollback(capsys, "--list", "--db", where[3])
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == ["#1", "#2"]
    assert lines[0].endswith("to epoch 3: loss exploded")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--to-epoch", "-1"], "must be 0 or more"),
        (["--to-epoch", "9"], "reported epochs up to 5: there is no checkpoint of epoch 9"),
        (["--to-epoch", "2", "--reason", "x" * 501], "at most 500 characters"),
        ([], "--to-epoch N"),
    ],
)
async def test_nonsense_is_refused_and_nothing_is_stored(
    coordinator: Running,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    says: str,
) -> None:
    coordinator.service.store.contributions.record(5, 1_700_000_000.0, 512, [])
    code, out, err = rollback(capsys, *args, *files(tmp_path, coordinator.key))
    assert code == 1
    assert out == ""
    assert says in err
    assert coordinator.service.store.rollbacks.all() == []
    # the newest reported epoch's checkpoint (the state after it) may be asked for
    assert rollback(capsys, "--to-epoch", "6", *files(tmp_path, coordinator.key))[0] == 0


async def test_the_command_checks_the_key_the_project_and_the_checkpoint_folder(
    coordinator: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = files(tmp_path, coordinator.key)
    other = tmp_path / "other-key.pem"
    Identity.generate().save(other)
    code, _, err = rollback(capsys, "--to-epoch", "1", *where[:-1], str(other))
    assert code == 1
    assert "the manifest names project key" in err

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / "checkpoint-00000004.pt").write_bytes(b"")
    code, _, err = rollback(capsys, "--to-epoch", "2", "--checkpoints", str(folder), *where)
    assert code == 1
    assert f"{folder} holds no checkpoint of epoch 2; it holds checkpoint-00000004.pt" in err
    assert rollback(capsys, "--to-epoch", "4", "--checkpoints", str(folder), *where)[0] == 0

    code, _, err = rollback(
        capsys, "--to-epoch", "1", *files(tmp_path, coordinator.key, mode="open")
    )
    assert code == 1
    assert "open" in err  # nobody would hear it: no coordinator serves an open project's peers

    diloco = in_diloco_mode(Path(where[1]), tmp_path / "diloco.toml")
    code, _, err = rollback(capsys, "--to-epoch", "4", "--manifest", str(diloco), *where[2:])
    assert code == 1
    assert "diloco mode" in err  # its peers would not follow the order: none is signed
    assert [o.to_epoch for o in coordinator.service.store.rollbacks.all()] == [4]


async def test_a_peers_keeper_reads_the_order_within_one_refresh(tmp_path: Path) -> None:
    """The keeper polls the order with the revocations; the gate holds its text (verified later,
    by the training side)."""
    baseline = open_fd_count()
    async with (
        running_coordinator(tmp_path) as running,
        CoordinatorClient(running.url, timeout=5.0) as client,
    ):
        running.add_user("alice")
        identity = Identity.generate()
        gate = AccessGate(ACCOUNT_PROJECT, running.key.peer_id, identity.peer_id)
        keeper = PassKeeper(
            AccountSession(client, await client.login("alice", PASSWORD)), gate, identity.sign
        )
        await keeper.start()
        try:
            assert gate.rollback_order is None

            def sign(sequence: int) -> str:
                signed = sign_order(
                    running.key, ACCOUNT_PROJECT, sequence=sequence, to_epoch=7, issued=time.time()
                )
                return order_to_text(signed)

            stored = running.service.store.rollbacks.issue(7, "", time.time(), sign)
            await wait_until(lambda: gate.rollback_order == stored.text)  # refresh: 0.2 s
            assert keeper.error is None
        finally:
            await keeper.close()
    await assert_no_leaks(baseline)
