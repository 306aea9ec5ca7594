"""``barnraise swarm --byzantine K``: the flags reach the peers, the misbehaving peers are named,
and the backbone's accusations are passed on with the swarm's names for the peers. No peer
process runs here (a whole swarm takes minutes: ``barnraise swarm --peers 3 --byzantine 1`` by
hand, figures in the README); the children are stand-ins that print what real ones print."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from core.cli.main import build_parser
from core.cli.peer.command import _settings
from core.cli.swarm.command import _options, _usage_problem
from core.net import Identity
from core.project import load_manifest
from core.swarm import run as swarm_run
from core.swarm.accused import REPEAT_SECONDS, Accusations, LogTail
from core.swarm.byzantine import Attack
from core.swarm.demo_data import DEMO_MANIFEST
from core.swarm.run import LocalSwarmRun, SwarmOptions
from core.util.clock import FakeClock
from core.util.errors import ConfigError
from core.worker.events import PeerEvent, PeerReady
from tests.support.leaks import wait_until
from tests.swarm.test_run import Heard


class Told(Heard):
    """Heard, and the Byzantine peers and accusations too."""

    def byzantine(self, name: str, peer: str, attack: str) -> None:
        self.said.append(("byzantine", (name, peer, attack)))

    def evidence(self, line: str) -> None:
        self.said.append(("evidence", line))

    def accused(self, lines: list[str]) -> None:
        self.said.append(("accused", lines))

    def of(self, kind: str) -> list[Any]:
        return [what for said, what in self.said if said == kind]


def test_the_flags_are_checked_and_reach_the_options() -> None:
    args = build_parser("swarm").parse_args(["swarm", "--peers", "3", "--byzantine", "1"])
    assert _usage_problem(args) is None
    options = _options(args)
    assert (options.byzantine, options.attack) == (1, "scale")  # x1000 unless told otherwise
    too_many = build_parser("swarm").parse_args(["swarm", "--peers", "2", "--byzantine", "3"])
    assert _usage_problem(too_many) == "--byzantine must be 0 to --peers (2), not 3"
    liar = build_parser("swarm").parse_args(
        ["swarm", "--byzantine", "1", "--attack", "lying-reducer"]
    )
    assert _options(liar).attack == "lying-reducer"
    with pytest.raises(SystemExit):  # argparse's choices
        build_parser("swarm").parse_args(["swarm", "--attack", "bitflip"])
    with pytest.raises(ValueError, match="how many of the 1 trainer"):
        SwarmOptions(peers=1, byzantine=2)
    with pytest.raises(ValueError, match="no attack 'bitflip'"):
        SwarmOptions(byzantine=1, attack="bitflip")


def test_a_peer_told_to_attack_gets_a_misbehaviour() -> None:
    def settings(*extra: str) -> Any:
        args = build_parser("peer").parse_args(["peer", "--manifest", str(DEMO_MANIFEST), *extra])
        return _settings(args)

    plain = settings()
    assert plain.misbehaviour is None
    assert not plain.manifest.averaging.verify_reducers  # the demo manifest's default
    assert settings("--attack", "Sign-Flip").misbehaviour.attack is Attack.SIGN_FLIP
    liar = settings("--attack", "lying-reducer", "--verify-reducers")
    assert liar.misbehaviour.attack is Attack.LYING_REDUCER
    assert liar.manifest.averaging.verify_reducers
    with pytest.raises(ConfigError, match="no attack named 'x'"):
        settings("--attack", "x")


class _Child:
    """A peer process as the swarm sees it: the events it prints, then its end."""

    def __init__(self, name: str, args: list[str], events: list[PeerEvent]) -> None:
        self.name, self.args, self._events = name, args, list(events)
        self.stopped = asyncio.Event()
        self.proc = type("Proc", (), {"pid": 0})()

    async def event(self) -> PeerEvent | None:
        if self._events:
            return self._events.pop(0)
        await self.stopped.wait()
        return None

    async def stop(self) -> None:
        self.stopped.set()


async def test_the_last_trainers_attack_and_the_accusations_name_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    log = work / "logs" / "backbone.log"
    log.parent.mkdir(parents=True)
    aux, *peers = [str(Identity.generate().peer_id) for _ in range(4)]
    log.write_text(f"an earlier run's line: evidence: peer {peers[2]} accused\n")  # not this run's
    children: list[_Child] = []

    async def spawn(name: str, args: list[str], *_: Any, **__: Any) -> _Child:
        peer, role = (aux, "backbone") if name == "backbone" else (peers[int(name[-1])], "trainer")
        address = f"/ip4/127.0.0.1/tcp/{4000 + len(children)}/p2p/{peer}"
        child = _Child(name, args, [PeerReady(address, role)])
        children.append(child)
        return child

    monkeypatch.setattr(swarm_run, "spawn_command", spawn)
    monkeypatch.setattr(swarm_run, "EVIDENCE_POLL", 0.01)
    told = Told()
    options = SwarmOptions(peers=3, byzantine=1, attack="nan", work_dir=work)
    swarm = LocalSwarmRun(options, told, dirs=swarm_run.UserDirs.under(tmp_path / "home"))
    swarm._announce = lambda *_: None  # no record: no engine here should offer it
    manifest = load_manifest(DEMO_MANIFEST)
    try:
        assert await swarm._start_peers(manifest, work, "http://127.0.0.1:1/") is not None
        attacking = [c.name for c in children if "--attack" in c.args]
        assert attacking == ["peer-2"]  # the last one of three
        assert children[-1].args[children[-1].args.index("--attack") + 1] == "nan"
        assert not any("--verify-reducers" in c.args for c in children)
        await wait_until(lambda: bool(told.of("byzantine")))
        assert told.of("byzantine") == [("peer-2", peers[2], "nan")]
        with log.open("a") as file:  # what the backbone logs, as it logs it
            for _ in range(3):
                file.write(f"2026 WARNING core.training.dedloc.backbone: evidence: peer {peers[2]} "
                           "accused by 3 peer(s) (3 finding(s)); part 1 ... nonfinite\n")  # fmt: skip
            file.write(f"evidence: peer {peers[0]} accused by 1 peer(s) (1 finding(s)); clip\n")
        await wait_until(lambda: len(told.of("evidence")) == 2)
    finally:
        await swarm._close()
    first, honest = told.of("evidence")
    # the first accusation of each peer is shown, named; repeats wait for REPEAT_SECONDS
    assert first.startswith(f"evidence: peer {peers[2]} [peer-2, misbehaving on purpose] accused")
    assert honest.startswith(f"evidence: peer {peers[0]} [peer-0] accused")
    assert told.of("accused") == [
        [
            f"{peers[2]} [peer-2, misbehaving on purpose]: named in 3 accusation(s)",
            f"{peers[0]} [peer-0]: named in 1 accusation(s)",
        ]
    ]


async def test_a_swarm_with_a_lying_reducer_verifies_reducers_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    children: list[_Child] = []

    async def spawn(name: str, args: list[str], *_: Any, **__: Any) -> _Child:
        peer = str(Identity.generate().peer_id)
        role = "backbone" if name == "backbone" else "trainer"
        child = _Child(name, args, [PeerReady(f"/ip4/127.0.0.1/tcp/4000/p2p/{peer}", role)])
        children.append(child)
        return child

    monkeypatch.setattr(swarm_run, "spawn_command", spawn)
    options = SwarmOptions(peers=3, byzantine=1, attack="lying-reducer", work_dir=work)
    swarm = LocalSwarmRun(options, Told(), dirs=swarm_run.UserDirs.under(tmp_path / "home"))
    swarm._announce = lambda *_: None
    try:
        assert await swarm._start_peers(load_manifest(DEMO_MANIFEST), work, "http://x/") is not None
    finally:
        await swarm._close()
    assert [c.name for c in children] == ["backbone", "peer-0", "peer-1", "peer-2"]
    assert all("--verify-reducers" in c.args for c in children)  # the backbone too
    assert [c.name for c in children if "--attack" in c.args] == ["peer-2"]


def test_accusations_are_read_from_a_growing_log_and_repeats_are_thinned(tmp_path: Path) -> None:
    log = tmp_path / "backbone.log"
    log.write_text("before\n")
    tail = LogTail.at_end(log)
    assert tail.new_lines() == []
    with log.open("a") as file:
        file.write("one\ntw")
    assert tail.new_lines() == ["one"]  # a line half written waits for its end
    with log.open("a") as file:
        file.write("o\n")
    assert tail.new_lines() == ["two"]
    log.write_text("new\n")  # rotated: read again from its start
    assert tail.new_lines() == ["new"]
    assert LogTail(tmp_path / "missing.log").new_lines() == []

    clock = FakeClock()
    accusations = Accusations(clock=clock)
    peer = str(Identity.generate().peer_id)
    line = f"x evidence: peer {peer} accused by 2 peer(s)"
    assert accusations.read("no accusation here") is None
    assert accusations.read(line) == f"evidence: peer {peer} accused by 2 peer(s)"
    assert accusations.read(line) is None
    assert accusations.read(line) is None
    clock.advance_to(REPEAT_SECONDS)
    assert accusations.read(line) == (
        f"evidence: peer {peer} accused by 2 peer(s) (and 2 more since the last line shown)"
    )
    assert accusations.summary() == [
        f"{peer} [not started by this swarm]: named in 4 accusation(s)"
    ]
