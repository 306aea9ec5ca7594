"""A mixture of experts across home routers: a volunteer's expert server behind a cone NAT, a trainer
behind a symmetric one, and an organizer's expert server on the public host (the backbone, relaying).

Between the two homes no direct path exists (a symmetric NAT cannot be punched from a cone one), so
the trainer can reach the home server's experts only through the backbone's relay. Asserted: the
home server announces where it can really be reached (its relay address, never a loopback or its
LAN address), the trainer's calls reach the home server's experts (they serve samples), the share of
expert calls answered ends high, and the trainer's loss falls.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core.util.process.resources import resource_path
from tests.lab.conftest import MakeLab
from tests.lab.natlab import NatLab
from tests.lab.procs import Event, LabProcess

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(420)]

MANIFEST = resource_path("dmoe-demo/project.toml")


def dht_get(lab: NatLab, where: str, bootstrap: str, key: str, how: str = "get") -> str:
    """``key``'s record read from ``where``: whole (``get``) or the first copy found (``first``)."""
    argv = [sys.executable, "-m", "tests.lab.dht_probe", bootstrap, how, key]
    done = lab.run(where, argv, timeout=60)
    return done.stdout.strip() or done.stderr.strip()[-2000:]


def served(e: Event) -> bool:
    return e.get("event") == "served" and e.get("backward_samples", 0) > 0


def test_a_trainer_behind_a_symmetric_nat_uses_experts_behind_a_cone_nat(
    make_lab: MakeLab, tmp_path: Path
) -> None:
    lab = make_lab("cone", "symmetric")
    common = ["--manifest", str(MANIFEST), "--stats-every", "2", "--threads", "1"]
    backbone_proc = LabProcess(
        lab,
        "pub",
        ["experts", *common, "--uids", "ffn.0.*", "ffn.1.*", "--offer-relay"],
        tmp_path / "pub.log",
    )
    backbone = backbone_proc.wait_for(lambda e: e.get("event") == "ready", 120)["address"]
    assert backbone.startswith(f"/ip4/{lab.PUB_IP}/tcp/"), backbone
    home = LabProcess(
        lab,
        "h1",
        ["experts", *common, "--uids", "ffn.2.*", "ffn.3.*", "--initial-peers", backbone],
        tmp_path / "h1.log",
    )
    home_ready = home.wait_for(lambda e: e.get("event") == "ready", 120)
    home_id = home_ready["address"].rsplit("/", 1)[-1]
    trainer = LabProcess(
        lab,
        "h2",
        ["peer", "--manifest", str(MANIFEST), "--threads", "1", "--initial-peers", backbone],
        tmp_path / "h2.log",
    )
    trainer.wait_for(lambda e: e.get("event") == "ready", 120)

    # the home server's experts are served to the trainer: through the relay, the only way
    try:
        home.wait_for(served, 240)
    except AssertionError as exc:
        # which side stalled: the home server's counts, the trainer's own view and its log
        last_served = [e for e in home.events if e.get("event") == "served"][-1:]
        last_progress = [e for e in trainer.drain() if e.get("event") == "progress"][-1:]
        # where the DHT sends trainers for the home server's experts now: the expert's record, and
        # the prefix records the trainer's beam search reads (whole, and the first copy found)
        records = []
        for key, how in (("ffn.2.0", "get"), ("ffn", "get"), ("ffn", "first"), ("ffn.2", "get")):
            try:
                records.append(f"{key} ({how}): {dht_get(lab, 'h2', backbone, key, how)}")
            except (AssertionError, OSError, subprocess.SubprocessError) as lookup:
                records.append(f"{key} ({how}): no answer: {lookup}")
        said = "\n".join(records)
        raise AssertionError(
            f"{exc}\nhome's last counts: {last_served}\ntrainer's last progress: "
            f"{last_progress}\nthe DHT's records:\n{said}\ntrainer's log:\n{trainer.tail()}"
        ) from None
    announced = dht_get(lab, "h2", backbone, "ffn.2.0")
    assert announced.startswith("relay:") or "p2p-circuit" in announced, announced
    assert home_id in announced, announced
    assert "/127." not in announced, announced

    progress = [e for e in trainer.events if e.get("event") == "progress"]
    while len(progress) < 12:
        progress.append(
            trainer.wait_for(lambda e: e.get("event") == "progress" and e not in progress, 120)
        )
    first, last = progress[0], progress[-1]
    assert last["loss"] < 0.7 * first["loss"], [p["loss"] for p in progress]
    # early calls may have gone to the home server's LAN address before its relay was announced;
    # since then the calls are answered
    recent = trainer.wait_for(
        lambda e: e.get("event") == "progress" and e["steps"] > last["steps"], 120
    )
    assert recent["experts_answered"] > 0.8, recent
