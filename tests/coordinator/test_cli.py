"""``barnraise coordinator``: managing users through the CLI, and the service as a real process."""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from core.cli.main import main
from core.coordinator import CoordinatorStore, Password
from core.coordinator.people.passwords import verify_password
from core.coordinator.reports.evidence_records import Accepted
from core.net import Identity
from core.project.signed import parse_envelope
from core.trust.evidence import sign_evidence
from tests.coordinator.conftest import PROJECT, manifest_text

OPEN_MANIFEST = f"""
[project]
name = "{PROJECT}"

[[data.sources]]
urls = ["shards/a.jsonl"]
"""


def users(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["coordinator", "users", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_users_add_ban_unban_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "c.db")
    code, out, _ = users(capsys, "add", "Grace", "--db", db)
    assert code == 0
    assert "invited Grace" in out
    monkeypatch.setattr(sys, "stdin", io.StringIO("s3cret password\n"))
    code, out, _ = users(capsys, "add", "aux", "--moderator", "--password-stdin", "--db", db)
    assert (code, out.strip()) == (0, "added aux (moderator), allowlisted")
    code, out, _ = users(capsys, "ban", "grace", "--reason", "spam", "--db", db)
    assert code == 0
    assert "banned Grace" in out

    code, out, _ = users(capsys, "list", "--db", db)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["username", "role", "status", "created"]
    assert lines[1].split()[:3] == ["aux", "moderator", "allowlisted"]
    assert lines[2].split()[:3] == ["Grace", "volunteer", "banned"]
    assert lines[2].endswith("(spam)")

    code, out, _ = users(capsys, "unban", "GRACE", "--db", db)
    assert (code, out.strip()) == (0, "unbanned Grace")
    code, out, _ = users(capsys, "list", "--json", "--db", db)
    listed = {user["username"]: user for user in json.loads(out)}
    assert listed["Grace"]["banned"] is False
    assert listed["Grace"]["signed_up"] is False
    assert listed["aux"]["role"] == "moderator"
    with CoordinatorStore(Path(db)) as store:
        stored = store.accounts.password_hash("aux")
        assert stored is not None
        assert verify_password(Password("s3cret password"), stored)  # without the newline


def test_users_errors_are_clear(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "c.db")
    code, _, err = users(capsys, "list", "--db", db)
    assert code == 1
    assert "no coordinator database" in err
    users(capsys, "add", "alice", "--db", db)
    code, _, err = users(capsys, "ban", "nobody", "--db", db)
    assert (code, err.strip()) == (1, "barnraise: error: there is no user 'nobody'")
    code, _, err = users(capsys, "add", "robert'; DROP TABLE users;--", "--db", db)
    assert code == 1
    assert "letters, digits" in err
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, _, err = users(capsys, "add", "bob", "--password-stdin", "--db", db)
    assert code == 1
    assert "read no password" in err
    monkeypatch.setattr(sys, "stdin", io.StringIO("short\n"))
    code, _, err = users(capsys, "add", "bob", "--password-stdin", "--db", db)
    assert code == 1
    assert "8 to 1024" in err
    assert "short" not in err.replace("8 to 1024", "")
    assert "Traceback" not in err
    with pytest.raises(SystemExit):  # --db or --manifest is required
        main(["coordinator", "users", "list"])


def test_users_find_the_default_database_from_the_manifest(
    tmp_path: Path, barnraise_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "project.toml"
    manifest.write_text(OPEN_MANIFEST)
    code, _, _ = users(capsys, "add", "alice", "--manifest", str(manifest))
    assert code == 0
    assert (barnraise_home / "data" / "coordinator" / f"{PROJECT}.db").exists()


def test_a_manifest_naming_another_project_key_is_refused(
    tmp_path: Path, barnraise_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["coordinator"]) == 1
    assert "needs --manifest" in capsys.readouterr().err
    named = Identity.generate().peer_id
    manifest = tmp_path / "project.toml"
    manifest.write_text(manifest_text(str(named)))
    key = tmp_path / "key.pem"
    code = main(["coordinator", "--manifest", str(manifest), "--db", str(tmp_path / "c.db")])
    err = capsys.readouterr().err
    assert code == 1
    assert str(named) in err
    assert "no key file" in err
    assert not (tmp_path / f"{PROJECT}-key.pem").exists()  # no stray key is created
    code = main(["coordinator", "--manifest", str(manifest), "--bootstrap", "nowhere"])
    assert code == 1
    assert "bootstrap address 'nowhere'" in capsys.readouterr().err
    held = Identity.load_or_create(key).peer_id
    code = main(["coordinator", "--manifest", str(manifest), "--key", str(key)])
    err = capsys.readouterr().err
    assert code == 1
    assert str(named) in err
    assert str(held) in err
    assert "Traceback" not in err


def test_the_coordinator_process_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    manifest = tmp_path / "project.toml"
    manifest.write_text(OPEN_MANIFEST)
    db = tmp_path / "coordinator" / "c.db"
    command = [sys.executable, "-m", "core", "coordinator", "--manifest", str(manifest)]
    bootstrap = f"/ip4/127.0.0.1/tcp/4001/p2p/{Identity.generate().peer_id}"
    command += ["--db", str(db), "--port", "0", "--bootstrap", bootstrap]
    env = dict(os.environ, BARNRAISE_HOME=str(tmp_path / "home"))
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        key = Identity.load(tmp_path / "coordinator" / f"{PROJECT}-key.pem").peer_id
        prefix = f"coordinator for {PROJECT} at http://127.0.0.1:"
        assert line.startswith(prefix), line
        port = int(line[len(prefix) :].split(",")[0])
        assert line.endswith(f", project key {key}")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/info", timeout=10) as response:
            info = json.load(response)
        assert info["project"] == PROJECT
        assert info["project_key"] == str(key)
        assert info["mode"] == "open"
        assert info["bootstrap"] == [bootstrap]
        # the manifest file it was given is served, signed: the project URL volunteers join by
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/manifest", timeout=10) as response:
            signed = parse_envelope(response.read())
        assert signed.check(key).project.name == PROJECT
        assert (signed.version, signed.text) == (1, OPEN_MANIFEST)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert proc.stderr is not None
        err = proc.stderr.read()
        assert "created a new project key" in err
        key_file = tmp_path / "coordinator" / f"{PROJECT}-key.pem"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    assert db.exists()


def test_the_coordinator_never_imports_torch_or_the_training_code() -> None:
    code = (
        "import sys, core.cli.coordinator.command, core.coordinator; "
        "bad = [m for m in sys.modules if m.split('.')[0] == 'torch' "
        "or m.startswith(('core.training', 'core.engine', 'core.account'))]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_reports_list_the_accused_and_ban_one_by_peer_or_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "c.db"
    code = main(["coordinator", "reports", "--db", str(db)])
    assert (code, "there is no coordinator database" in capsys.readouterr().err) == (1, True)
    alice, mallory, stranger = Identity.generate(), Identity.generate(), Identity.generate()
    now = time.time()
    with CoordinatorStore(db) as store:
        store.add_user("alice")
        store.add_user("mallory")
        assert main(["coordinator", "reports", "--db", str(db)]) == 0
        assert capsys.readouterr().out.strip() == "no evidence reported"
        for user, peer in (("alice", alice), ("mallory", mallory)):
            store.peer_keys.claim(user, str(peer.peer_id), now)
            store.passes.record(user, str(peer.peer_id), now, now + 600)
        accused = [mallory.peer_id, mallory.peer_id, stranger.peer_id]
        evidence = [
            sign_evidence(alice, PROJECT, peer, round_key="grads.5", group=b"\xab", epoch=5,
                          part=part, chunk=-1, statistic="norm_ratio", value=850.0,
                          reason="norm 850x the median", time=now)
            for part, peer in enumerate(accused)
        ]  # fmt: skip
        store.evidence.record([Accepted(e, "alice") for e in evidence], now)

    code = main(["coordinator", "reports", "--db", str(db)])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["user", "status", "findings", "reporters"]
    assert lines[1].split()[:4] == ["mallory", "active", "2", "1"]
    assert lines[1].endswith("norm_ratio")
    assert f"peer {mallory.peer_id}" in lines[2]
    assert "latest: norm 850x the median" in lines[3]
    assert lines[4].split()[:4] == ["?", "active", "1", "1"]
    assert "an accusation, not proof" in out
    assert main(["coordinator", "reports", "--json", "--db", str(db)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(a["username"], a["findings"]) for a in listed] == [("mallory", 2), (None, 1)]

    # a peer nobody proved has nobody to ban; the accused peer's account is banned, its peer revoked
    code = main(["coordinator", "reports", "ban", str(stranger.peer_id), "--db", str(db)])
    assert (code, "no account here proved" in capsys.readouterr().err) == (1, True)
    code = main(
        ["coordinator", "reports", "--db", str(db), "ban", str(mallory.peer_id), "--reason", "x"]
    )
    assert code == 0
    assert capsys.readouterr().out.startswith(
        f"banned mallory (the account of peer {mallory.peer_id})"
    )
    with CoordinatorStore(db) as store:
        assert store.passes.revoked(time.time()) == [str(mallory.peer_id)]
        store.unban("mallory")
    # by name too
    assert main(["coordinator", "reports", "ban", "MALLORY", "--db", str(db)]) == 0
    assert "banned mallory" in capsys.readouterr().out
    code = main(["coordinator", "reports"])
    assert (code, "needs --db PATH or --manifest F" in capsys.readouterr().err) == (1, True)
