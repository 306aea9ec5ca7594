"""Volunteers behind home routers, started as the README tells them, train with a public backbone.

For each NAT pair the lab allows (cone/cone, cone/symmetric, symmetric/symmetric, fullcone/cone and
two homes with the same LAN subnet): a backbone on the public host with default arguments,
a volunteer's ``barnraise peer`` in each home with nothing but ``--initial-peers``. Asserted: how
every pair is connected (direct, punched or relayed, as the pair allows), an epoch in which both
volunteers' samples count and averaging is complete, and a DHT record stored from one home and
found from the other. In the cone/cone lab the second home runs the desktop engine instead
(``barnraise engine --headless`` and ``barnraise ctl attach``).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.lab.conftest import MakeLab
from tests.lab.natlab import NatKind, NatLab
from tests.lab.procs import ROOT, Event, LabProcess, peer_args, wait_connected

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(420)]

# What each pair of homes can have between them: a port forward makes a home public (direct);
# two endpoint-independent NATs punch; a symmetric NAT leaves the relay.
CASES = [
    pytest.param("cone", "cone", False, {"punched"}, True, id="cone-cone"),
    pytest.param("cone", "symmetric", False, {"relayed"}, False, id="cone-symmetric"),
    pytest.param("symmetric", "symmetric", False, {"relayed"}, False, id="symmetric-symmetric"),
    pytest.param("fullcone", "cone", False, {"direct", "punched"}, False, id="fullcone-cone"),
    pytest.param("cone", "cone", True, {"punched"}, False, id="same-lan"),
]


def network_of(proc: LabProcess) -> Event | None:
    events = [e for e in proc.events if e.get("event") == "network"]
    return events[-1] if events else None


def dht(lab: NatLab, where: str, bootstrap: str, *args: str) -> str:
    """One DHT operation from a throwaway client-mode node in ``where`` (``dht_probe``)."""
    argv = [sys.executable, "-m", "tests.lab.dht_probe", bootstrap, *args]
    done = lab.run(where, argv, timeout=60)
    return done.stdout.strip() or done.stderr.strip()[-2000:]


class Engine:
    """The desktop engine in a home (``barnraise engine --headless``), driven by ``barnraise ctl``."""

    def __init__(self, lab: NatLab, where: str, root: Path) -> None:
        self.lab, self.where = lab, where
        root.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "BARNRAISE_HOME": str(root / "home")}
        self.proc = LabProcess(lab, where, ["engine", "--headless"], root / "engine.log", self.env)

    def ctl(self, *args: str, timeout: float = 60) -> str:
        argv = [sys.executable, "-m", "core.cli.main", "ctl", *args]
        done = self.lab.run(self.where, argv, env=self.env, cwd=ROOT, timeout=timeout)
        assert done.returncode == 0, f"ctl {' '.join(args)}: {done.stderr}\n{self.proc.tail()}"
        return done.stdout

    def status(self) -> dict[str, Any]:
        return dict(json.loads(self.ctl("--json", "status")))

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            argv = [sys.executable, "-m", "core.cli.main", "ctl", "status"]
            done = self.lab.run(self.where, argv, env=self.env, cwd=ROOT, timeout=timeout)
            if done.returncode == 0:
                return
            assert time.monotonic() < deadline, f"the engine never answered\n{self.proc.tail()}"
            time.sleep(0.5)

    def wait_network(
        self, check: Callable[[dict[str, Any]], bool], timeout: float
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            network = self.status().get("network") or {}
            if check(network):
                return dict(network)
            assert time.monotonic() < deadline, f"engine's network: {network}\n{self.proc.tail()}"
            time.sleep(1.0)


@pytest.mark.parametrize(("nat1", "nat2", "same_lan", "between_homes", "engine_in_h2"), CASES)
def test_volunteers_behind_routers_train_with_the_backbone(  # noqa: PLR0917 - pytest fixtures
    make_lab: MakeLab,
    project: Path,
    tmp_path: Path,
    nat1: NatKind,
    nat2: NatKind,
    same_lan: bool,
    between_homes: set[str],
    engine_in_h2: bool,
) -> None:
    lab = make_lab(nat1, nat2, same_lan)
    aux = LabProcess(
        lab,
        "pub",
        ["backbone", *peer_args(project, tmp_path / "aux", "--checkpoint-every", "0")],
        tmp_path / "backbone.log",
    )
    ready = aux.wait_for(lambda e: e.get("event") == "ready", 120)
    backbone = ready["address"]
    assert backbone.startswith(f"/ip4/{lab.PUB_IP}/tcp/4002/"), backbone  # default port, public IP
    aux_id = backbone.rsplit("/", 1)[-1]
    homes = {}
    for home in ("h1", "h2")[: 1 if engine_in_h2 else 2]:
        args = ["peer", *peer_args(project, tmp_path / home, "--initial-peers", backbone)]
        homes[home] = LabProcess(lab, home, args, tmp_path / f"{home}.log")
    engine = Engine(lab, "h2", tmp_path / "h2-engine") if engine_in_h2 else None
    ids = {}
    for home, proc in homes.items():
        event = proc.wait_for(lambda e: e.get("event") == "ready", 120)
        ids[home] = event["address"].rsplit("/", 1)[-1]
        for address in proc.wait_for(lambda e: e.get("event") == "network", 60)["addresses"]:
            assert "/127." not in address, address
            assert "/::1/" not in address, address
    if engine is not None:
        # the desktop engine, as a volunteer drives it: attach the project, opt in
        engine.wait_ready(60)
        # the lab's other peers share this computer's CPU: a volunteer who lets the engine run
        # beside busy programs says so
        engine.ctl("set", "max_other_cpu_percent=100")
        engine.ctl("attach", str(project), "--initial-peers", backbone)
        engine.ctl("start")
    # every pair: the homes reach the backbone directly, and each other as their NATs allow
    for proc in homes.values():
        assert wait_connected(proc, aux_id, {"direct"}, 120) == "direct"
    if engine is None:
        kind = wait_connected(homes["h1"], ids["h2"], between_homes, 120)
        assert kind in between_homes
    else:
        # h1 learns the engine's peer from the group it averages with; the engine counts its own
        # links (the backbone direct, h1 punched) and says it is behind a router
        network = engine.wait_network(
            lambda n: (
                n.get("reachability") == "private"
                and n.get("direct", 0) >= 1
                and any(n.get(k, 0) >= 1 for k in between_homes)
            ),
            180,
        )
        assert network["peers"] >= 2, network

    # an epoch in which every volunteer's samples count, averaging complete
    def everyone_counted(e: Event) -> bool:
        counted = e.get("contributions", {})
        if e.get("event") != "metrics" or not all(counted.get(ids[h], 0) > 0 for h in homes):
            return False
        others = [p for p, n in counted.items() if p not in ids.values() and n > 0]
        return engine is None or bool(others)  # the engine's peer among them

    metrics = aux.wait_for(everyone_counted, 300)
    assert metrics["samples"] > 0
    for proc in homes.values():
        # a round of all three (the first ones may have run before every volunteer had joined)
        epoch = proc.wait_for(
            lambda e: e.get("event") == "epoch" and e.get("averaged") and e["group_size"] == 3,
            300,
        )
        assert epoch["samples"] > 0
    if engine is not None:
        engine_peer = next(p for p in metrics["contributions"] if p not in ids.values())
        kind = wait_connected(homes["h1"], engine_peer, between_homes, 120)
        assert kind in between_homes
        stats = engine.ctl("stats")
        assert re.search(r"all projects: [1-9][\d,]* samples", stats), stats
    # a record stored from one home is found from the other
    key = f"lab-{nat1}-{nat2}-{same_lan}"
    assert dht(lab, "h1", backbone, "store", key, "from h1") == "stored"
    assert dht(lab, "h2", backbone, "get", key) == "from h1"
