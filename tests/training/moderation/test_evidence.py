"""Signed evidence: the record signs and checks, findings are published in the DHT, and the
backbone collects them, names the accused, and reports them to the coordinator."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import replace

import pytest
import torch

from core.account import AccountSession, CoordinatorClient
from core.account.reporter import CoordinatorReporter
from core.averaging import Averager, AveragingResult, Finding
from core.dht import DHTConfig, DHTNode, HostTransport, owner_marker
from core.net import Identity
from core.training.dedloc.backbone import DedlocBackbone, DedlocBackboneConfig
from core.training.dedloc.optimizer import DedlocConfig
from core.training.links import PeerLinks
from core.training.moderation.evidence import (
    EvidenceBoard,
    EvidenceCollector,
    Reported,
    accusations,
)
from core.training.state import TrainingState
from core.trust.evidence import Evidence, InvalidEvidence, sign_evidence
from core.util.msgpack_codec import pack, unpack
from core.worker.bridge import TrainingBridge
from tests.conftest import MakeHost
from tests.coordinator.conftest import PASSWORD, PROJECT, start
from tests.support.leaks import poll_until, wait_until
from tests.training.conftest import AVERAGING, MakePeer, start_node
from tests.training.test_moderated import NET as MODERATED_NET
from tests.training.test_moderated import PROJECT as MODERATED
from tests.training.test_moderated import gate_for

GROUP = bytes.fromhex("3fa2c1d0" * 4)


def accuse(reporter: Identity, accused: Identity, **changes: object) -> Evidence:
    fields: dict[str, object] = {
        "round_key": "grads.12",
        "group": GROUP,
        "epoch": 12,
        "part": 2,
        "chunk": -1,
        "statistic": "norm_ratio",
        "value": 850.0,
        "reason": "norm 850× the group's median",
        "time": time.time(),
    }
    fields.update(changes)
    return sign_evidence(reporter, PROJECT, accused.peer_id, **fields)  # type: ignore[arg-type]


def result_with(*findings: Finding) -> AveragingResult:
    return AveragingResult(GROUP, [], 0, 100, 100, findings=list(findings))


def test_evidence_round_trips_and_forgeries_fail() -> None:
    alice, mallory = Identity.generate(), Identity.generate()
    evidence = accuse(alice, mallory)
    evidence.verify()
    assert Evidence.from_wire(unpack(pack(evidence.to_wire()))) == evidence
    from_json = Evidence.from_json(evidence.to_json())
    assert from_json == evidence
    from_json.verify()
    assert evidence.epoch == 12
    assert evidence.group == GROUP.hex()
    # any field changed after signing breaks the signature
    for change in (
        {"accused": alice.peer_id, "reporter": mallory.peer_id},
        {"value": 1.0},
        {"part": 3},
        {"reason": "all fine"},
        {"project": "other"},
    ):
        with pytest.raises(InvalidEvidence, match="not signed by its reporter"):
            dataclasses.replace(evidence, **change).verify()  # type: ignore[arg-type]
    # signed by mallory, naming alice as the reporter
    framed = accuse(mallory, Identity.generate())
    with pytest.raises(InvalidEvidence, match="not signed"):
        dataclasses.replace(framed, reporter=alice.peer_id).verify()


def test_evidence_is_bounded_and_printable() -> None:
    alice, mallory = Identity.generate(), Identity.generate()
    # what the signer is given is made to fit
    long = accuse(alice, mallory, reason="x\x1b[2J" + "y" * 5000, value=float("nan"))
    assert len(long.reason) == 300
    assert "\x1b" not in long.reason
    assert long.value is None
    with pytest.raises(InvalidEvidence, match="accuse itself"):
        accuse(alice, alice)
    with pytest.raises(InvalidEvidence, match="statistic"):
        accuse(alice, mallory, statistic="Norm Ratio")
    # what arrives from elsewhere is refused, not repaired
    good = accuse(alice, mallory).to_json()
    for change, words in (
        ({"reason": "\x1b[31mred"}, "reason must be printable"),
        ({"reason": "y" * 301}, "reason must be printable"),
        ({"round": "r" * 65}, "round must be printable"),
        ({"group": "XYZ"}, "group must be lowercase hex"),
        ({"part": -1}, "out of range"),
        ({"epoch": 2**80}, "out of range"),
        ({"value": "lots"}, "finite number"),
        ({"time": None}, "time"),
        ({"reporter": "not-a-peer"}, "reporter is not a PeerID"),
        ({"signature": "!" * 200}, "signature"),
    ):
        with pytest.raises(InvalidEvidence, match=words):
            Evidence.from_json({**good, **change})
    with pytest.raises(InvalidEvidence, match="list of 13"):
        Evidence.from_wire([1, 2, 3])


def test_accusations_name_the_peer_its_user_and_the_distinct_reporters() -> None:
    alice, bob, mallory = Identity.generate(), Identity.generate(), Identity.generate()
    items = [
        Reported(accuse(alice, mallory, chunk=0), "alice"),
        Reported(accuse(alice, mallory, chunk=1), "alice"),
        Reported(accuse(bob, mallory, chunk=0), None),
    ]
    (line,) = accusations(items, {str(mallory.peer_id): "mallory"})
    assert line.startswith(f"evidence: peer {mallory.peer_id} (user mallory) accused by 2 peer(s)")
    assert "(3 finding(s))" in line
    assert "part 2, chunk 0 of round grads.12 (group 3fa2c1d0)" in line
    assert "norm 850× the group's median" in line
    assert "reported by alice" in line


async def test_findings_are_published_and_forged_records_are_skipped(make_host: MakeHost) -> None:
    alice_host, alice_dht = await start_node(make_host, None)
    join = str(alice_host.addresses[0])
    mallory_host, mallory_dht = await start_node(make_host, join)
    aux_host, aux_dht = await start_node(make_host, join)
    try:
        alice = EvidenceBoard(alice_dht, alice_host.identity, PROJECT)
        EvidenceBoard(mallory_dht, mallory_host.identity, PROJECT)
        collector = EvidenceCollector(EvidenceBoard(aux_dht, aux_host.identity, PROJECT))
        finding = Finding(mallory_host.peer_id, 1, 4, "nonfinite", float("inf"), "NaN in chunk 4")
        assert await alice.publish(result_with(), "grads.3") == []  # nothing found: nothing stored
        (signed,) = await alice.publish(result_with(finding), "grads.3")
        assert (signed.epoch, signed.part, signed.chunk, signed.value) == (3, 1, 4, None)
        # mallory's own record holds an accusation in alice's name and one replayed from her
        victim = Identity.generate().peer_id
        forged = dataclasses.replace(
            sign_evidence(mallory_host.identity, PROJECT, victim, round_key="grads.3",
                          group=GROUP, epoch=3, part=0, chunk=-1, statistic="norm_ratio",
                          value=1e6, reason="framed", time=time.time()),
            reporter=alice_host.peer_id,
        )  # fmt: skip
        await mallory_dht.store(
            f"{PROJECT}.evidence",
            [[forged.to_wire(), signed.to_wire()]],
            time.time() + 60,
            subkey=owner_marker(mallory_dht.peer_id),
        )
        first = await poll_until(collector.collect, lambda got: len(got) > 0)
        assert [item.evidence for item in first] == [signed]
        # republished, it is passed on once
        await alice.publish(
            result_with(Finding(mallory_host.peer_id, 1, 5, "nonfinite", 1.0, "NaN")), "grads.4"
        )
        second = await poll_until(collector.collect, lambda got: len(got) > 0)
        assert [(i.evidence.round_key, i.evidence.chunk) for i in second] == [("grads.4", 5)]
        assert await collector.collect() == []
    finally:
        for dht in (aux_dht, mallory_dht, alice_dht):
            await dht.close()


async def test_a_trainers_round_publishes_its_findings(
    make_peer: MakePeer, make_host: MakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = torch.nn.Linear(2, 1)
    config = DedlocConfig(target_batch_size=10, average_state_every=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    peer = await make_peer(model, optimizer, config, start=False)
    accused = Identity.generate().peer_id
    found = result_with(Finding(accused, 0, -1, "clip_weight", 0.01, "clipped to 1% weight"))

    async def round_with_findings(self: PeerLinks, *args: object, **kwargs: object) -> object:
        return found

    monkeypatch.setattr(PeerLinks, "round", round_with_findings)
    board = peer.optimizer.evidence
    for epoch in (5, 6):  # one screen's finding in two epochs: held, not signed
        assert await peer.optimizer._average([torch.zeros(3)], 1.0, f"grads.{epoch}", 1) is found
    await wait_until(lambda: board.repeated.held(accused) == 2)
    assert await peer.optimizer._average([torch.zeros(3)], 1.0, "grads.7", 1) is found
    other = EvidenceBoard(peer.dht, peer.averager.host.identity, "collab")
    seen = await poll_until(other.fetch, lambda got: len(got) == 3)
    assert sorted((str(r.evidence.accused), r.evidence.round_key) for r in seen) == [
        (str(accused), f"grads.{epoch}") for epoch in (5, 6, 7)
    ]


async def test_the_backbone_collects_names_and_reports_evidence(
    make_host: MakeHost, tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    running, http = await start(tmp_path)  # type: ignore[arg-type]
    running.clock.advance(time.time() - running.clock.time())  # evidence is signed in real time
    coordinator = running.service
    alice_host, alice_dht = await start_node(make_host, None)
    aux_host, aux_dht = await start_node(make_host, str(alice_host.addresses[0]))
    averager = Averager(aux_host, aux_dht, PROJECT, replace(AVERAGING, compute=0.0))
    bridge = TrainingBridge()
    client = CoordinatorClient(coordinator.url)
    reporter = CoordinatorReporter(AccountSession(client, None))
    stop = asyncio.Event()
    task: asyncio.Task[None] | None = None
    try:
        running.add_user("aux", moderator=True)
        running.add_user("alice")
        running.add_user("mallory")
        mallory = Identity.generate()
        for user, identity in (("alice", alice_host.identity), ("mallory", mallory)):
            session = (await running.client.login(user))["session"]
            assert (await running.client.request_pass(session, identity)).status == 200
        reporter.session.replace(await client.login("aux", PASSWORD))
        model = torch.nn.Linear(2, 1)
        aux = DedlocBackbone(
            TrainingState(model, torch.optim.SGD(model.parameters(), lr=0.1)),
            PeerLinks.create(averager, bridge),
            DedlocBackboneConfig(target_batch_size=10**6, evidence_interval=0.2),
            on_evidence=reporter.submit_evidence,
        )
        caplog.set_level(logging.WARNING, logger="core.training.dedloc.backbone")
        task = asyncio.create_task(aux.run(stop))
        alice = EvidenceBoard(alice_dht, alice_host.identity, PROJECT)
        finding = Finding(mallory.peer_id, 2, -1, "norm_ratio", 850.0, "norm 850× the median")
        for epoch in (10, 11, 12):  # a screen's finding is signed once it repeats
            await alice.publish(result_with(finding), f"grads.{epoch}")
        await wait_until(lambda: len(coordinator.store.evidence.accused()) > 0)
        (accused,) = coordinator.store.evidence.accused()
        assert (accused.peer, accused.username, accused.reporters) == (
            str(mallory.peer_id),
            "mallory",
            1,
        )
        assert accused.statistics == ["norm_ratio"]
        assert any(
            f"evidence: peer {mallory.peer_id} accused by 1 peer(s)" in r.getMessage()
            and "norm 850× the median" in r.getMessage()
            for r in caplog.records
        )
        assert [item.evidence.reporter for item in aux.accusations] == [alice_host.peer_id]
    finally:
        stop.set()
        if task is not None:
            await task
        await reporter.close()
        await client.close()
        await averager.close()
        await bridge.aclose()
        await aux_dht.close()
        await alice_dht.close()
        await http.close()
        await coordinator.close()
    assert (reporter.evidence_sent, reporter.failed, list(reporter.rejected)) == (1, 0, [])


async def test_in_a_moderated_project_records_carry_passes_and_revoked_reporters_are_skipped(
    make_host: MakeHost,
) -> None:
    project_key = Identity.generate()
    members = []
    for name in ("alice", "aux"):
        identity = Identity.generate()
        gate = gate_for(project_key, identity, name)
        host = await make_host(MODERATED_NET, identity=identity, access=gate)
        dht = DHTNode(HostTransport(host), DHTConfig(rpc_timeout=2.0))
        members.append((host, dht, gate))
        await dht.start([str(members[0][0].addresses[0])] if name == "aux" else [])
    (alice_host, alice_dht, _), (aux_host, aux_dht, aux_gate) = members
    try:
        alice = EvidenceBoard(alice_dht, alice_host.identity, MODERATED, access=alice_host.access)
        aux = EvidenceBoard(aux_dht, aux_host.identity, MODERATED, access=aux_gate)
        accused = Identity.generate().peer_id
        await alice.publish(result_with(Finding(accused, 0, 1, "nonfinite", 3.0, "NaN")), "g.1")
        (seen,) = await poll_until(aux.fetch, lambda got: len(got) > 0)
        assert (seen.reporter_user, seen.evidence.accused) == ("alice", accused)
        aux_gate.set_revoked([alice_host.peer_id])  # alice was banned since she published
        assert await aux.fetch() == []
    finally:
        for _, dht, _ in reversed(members):
            await dht.close()
