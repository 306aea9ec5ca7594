"""``barnraise coordinator audit``: the coordinator's credit against a backbone's metrics lines,
every difference named with its reason, the store's own totals checked, bad input refused."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from core.cli.main import main
from core.coordinator import CoordinatorStore
from core.coordinator.people.names import Username
from core.coordinator.reports.receipts import Vouched
from core.coordinator.reports.records import Counted
from core.net import Identity
from core.trust.receipts import sign_receipt


def credit(store: CoordinatorStore, epoch: int, **samples: int) -> None:
    counted = [
        Counted(f"peer-{name}", Username.parse(name).key, n, 1.0) for name, n in samples.items()
    ]
    store.contributions.record(epoch, 1_700_000_000.0 + epoch, sum(samples.values()), counted)


def write_metrics(path: Path, *lines: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + "{half a line")
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "c.db"
    with CoordinatorStore(path) as store:
        for name in ("alice", "bob", "mallory"):
            store.add_user(name)
        store.ban("mallory")
        credit(store, 1, alice=64, bob=32)
        credit(store, 2, alice=64)
        credit(store, 9, alice=64)  # beyond what the metrics cover: not compared
    return path


def audit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["coordinator", "audit", *args])
    out, err = capsys.readouterr()
    return code, out + err


def test_every_difference_is_named_with_its_reason(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = write_metrics(
        tmp_path / "metrics.jsonl",
        {"epoch": 1, "contributions": {"Alice": 64, "bob": 32}},
        {"epoch": 2, "contributions": {"alice": 64, "bob": 32, "mallory": 16, "ghost": 8}},
        {"epoch": 3, "contributions": {"alice": 64}},
        {"epoch": 1, "late": True, "contributions": {"bob": 16}},
    )
    code, out = audit(capsys, "--metrics", str(metrics), "--db", str(db))
    assert code == 1, out
    assert "epoch 1: bob: credited 32, the records show 48 (the samples differ)" in out
    assert "epoch 2: bob: credited 0, the records show 32 (the coordinator refused it" in out
    assert "epoch 2: mallory: credited 0, the records show 16 (the account is banned)" in out
    assert "epoch 2: ghost: credited 0, the records show 8 (no account has this name" in out
    assert (
        "epoch 3: alice: credited 0, the records show 64 (the epoch's report never reached" in out
    )
    assert "epochs 1 to 3 (1 more at the coordinator, not compared)" in out
    assert "no difference" not in out
    code, out = audit(capsys, "--metrics", str(metrics), "--db", str(db), "--json")
    report = json.loads(out)
    assert (code, report["clean"], report["epochs"]) == (1, False, [1, 3])
    assert report["users"]["alice"] == {"credited": 128, "recorded": 192}
    assert len(report["differences"]) == 5


def test_records_that_match_give_a_clean_audit_across_rotated_files(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(Path(f"{metrics}.1"), {"epoch": 1, "contributions": {"alice": 64, "bob": 16}})
    write_metrics(
        metrics,
        {"epoch": 1, "late": True, "contributions": {"bob": 16}},
        {"epoch": 2, "contributions": {"alice": 64}},
    )
    code, out = audit(capsys, "--metrics", str(metrics), "--db", str(db))
    assert code == 0, out
    assert "no difference: the coordinator credited exactly what the records show" in out


def test_credit_withdrawn_at_both_ends_audits_clean_and_keeps_the_three_copies_agreeing(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # bob was caught faking work: the backbone took back his epoch 1, the coordinator too
    with CoordinatorStore(db) as store:
        assert store.contributions.withdraw(1, {"peer-bob": ""}) == 32
        assert store.contributions.withdraw(1, {"peer-bob": ""}) == 0  # sent again: nothing more
        assert store.contributions.withdraw(7, {"peer-bob": ""}) == 0  # nothing to take
        credit(store, 1, bob=32)  # the epoch's report sent again cannot give it back
        sums = store.contributions.sums_by_user()
        assert sums[Username.parse("bob").key] == (0, 0, 0, 0)
        assert sums[Username.parse("alice").key][:3] == (192, 192, 192)
        assert store.contributions.epoch_totals() == (3, 64 + 64 + 64)
    metrics = write_metrics(
        tmp_path / "metrics.jsonl",
        {"epoch": 1, "contributions": {"alice": 64, "bob": 32}},
        {"epoch": 2, "contributions": {"alice": 64}},
        {"epoch": 1, "withdrawn": True, "contributions": {"bob": 32}},
    )
    code, out = audit(capsys, "--metrics", str(metrics), "--db", str(db), "--json")
    report = json.loads(out)
    assert (code, report["clean"], report["inconsistent"]) == (0, True, [])
    assert report["users"]["bob"] == {"credited": 0, "recorded": 0}
    # the same records without the withdrawal: the coordinator credited less than they show
    unwithdrawn = write_metrics(
        tmp_path / "m2.jsonl",
        {"epoch": 1, "contributions": {"alice": 64, "bob": 32}},
        {"epoch": 2, "contributions": {"alice": 64}},
    )
    code, out = audit(capsys, "--metrics", str(unwithdrawn), "--db", str(db))
    assert code == 1
    assert "epoch 1: bob: credited 0, the records show 32" in out


def test_totals_that_disagree_with_the_contribution_rows_are_reported(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE totals SET samples = samples + 1 WHERE user_key = 'bob'")
    metrics = write_metrics(
        tmp_path / "m.jsonl", {"epoch": 1, "contributions": {"alice": 64, "bob": 32}}
    )
    code, out = audit(capsys, "--metrics", str(metrics), "--db", str(db))
    assert code == 1
    assert (
        "the coordinator's own totals disagree: bob: contributions 32 and expert samples 0 "
        "(receipts: 0), total 33, days 32"
    ) in out


def test_bad_input_gets_a_clear_error(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = audit(capsys, "--metrics", str(tmp_path / "none.jsonl"), "--db", str(db))
    assert code == 2
    assert "there is no metrics file at" in out
    code, out = audit(capsys, "--metrics", str(db), "--db", str(tmp_path / "nowhere.db"))
    assert code == 2
    assert "there is no coordinator database at" in out
    bad = write_metrics(tmp_path / "bad.jsonl", {"epoch": "one", "contributions": {}})
    code, out = audit(capsys, "--metrics", str(bad), "--db", str(db))
    assert code == 2
    assert "the metrics are not a backbone's: line 1" in out
    worse = write_metrics(tmp_path / "worse.jsonl", {"epoch": 1, "contributions": {"a": -4}})
    code, out = audit(capsys, "--metrics", str(worse), "--db", str(db))
    assert code == 2
    assert "'a' has -4 samples" in out


def test_expert_samples_must_be_backed_by_receipts_that_still_check_out(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer, server = Identity.generate(), Identity.generate()
    signed = sign_receipt(trainer, "collab", server.peer_id, session=bytes(16), sequence=1,
                          forward_samples=300, backward_samples=100)  # fmt: skip
    with CoordinatorStore(db) as store:
        store.receipts.record("alice", [Vouched(signed, "bob")], 1_700_000_000.0)
    metrics = write_metrics(
        tmp_path / "m.jsonl", {"epoch": 1, "contributions": {"alice": 64, "bob": 32}}
    )
    code, out = audit(capsys, "--metrics", str(metrics), "--db", str(db))
    assert code == 0, out
    assert "alice: 400 expert samples, credited by receipts that 1 other account(s) signed" in out
    # a row whose credit its signed receipt no longer backs
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE receipts SET credited = credited + 50")
    code, out = audit(capsys, "--metrics", str(metrics), "--db", str(db))
    assert code == 1
    assert "alice: contributions 192 and expert samples 400 (receipts: 450)" in out
    assert "a stored receipt fails its check: alice: server" in out
    assert "the row credited 450 samples, its receipt vouches for 400" in out


def test_the_audit_shows_each_users_checked_share_from_the_checks_beside_the_metrics(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = write_metrics(
        tmp_path / "metrics.jsonl",
        {"epoch": 1, "contributions": {"alice": 64, "bob": 32}},
        {"epoch": 2, "contributions": {"alice": 64}},
    )

    def check(user: str, verdict: str, claimed: int) -> dict[str, object]:
        return {"epoch": 1, "peer": "12D3", "user": user, "verdict": verdict, "claimed": claimed}

    write_metrics(
        tmp_path / "checks.jsonl",
        check("alice", "passed", 64),
        check("bob", "unreached", 0),
        check("bob", "caught", 16),
        check("bob", "apart", 32),
    )
    code, out = audit(capsys, "--metrics", str(metrics), "--db", str(db))
    assert code == 0, out
    assert re.search(r"alice\s+128\s+128\s+50%", out), out
    assert re.search(r"bob\s+32\s+32\s+0%", out), out
    assert (
        "bob: 1 check(s) caught faked work, 1 could not reach its peer, 1 found it computing" in out
    )
    code, out = audit(capsys, "--metrics", str(metrics), "--db", str(db), "--json")
    checked = json.loads(out)["checked"]
    assert checked["alice"] == {
        "passed": 1,
        "caught": 0,
        "unreached": 0,
        "apart": 0,
        "samples": 64,
        "share": 0.5,
    }
    assert checked["bob"]["caught"] == checked["bob"]["apart"] == 1
    # a file that is not a backbone's checks is refused, naming the line
    bad = write_metrics(tmp_path / "bad.jsonl", {"verdict": "maybe", "user": "alice"})
    code, out = audit(capsys, "--metrics", str(metrics), "--checks", str(bad), "--db", str(db))
    assert code == 2
    assert "the checks are not a backbone's: line 1" in out
