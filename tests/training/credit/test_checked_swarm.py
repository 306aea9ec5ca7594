"""Checked work in a real collaboration on loopback: two honest trainers and one that lies about
its work, with a backbone that checks every epoch. The liar is caught, accused and credited
nothing; the honest trainers pass every check and are credited exactly what they computed."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import torch

from core.swarm.byzantine import Attack, FreeRider, Misbehaviour
from core.training.credit.metrics import EpochMetrics
from core.training.dedloc.backbone import DedlocBackbone, DedlocBackboneConfig, WorkChecks
from core.training.dedloc.optimizer import DedlocConfig, DedlocOptimizer
from core.training.state import TrainingState
from core.training.trainer import Trainer
from tests.support.leaks import wait_until
from tests.training.conftest import Node
from tests.training.dedloc.test_collaborative import dataset, fresh_model, make_optimizer

TARGET, MICRO, EPOCHS = 128, 16, 6


def batches(seed: int) -> Iterator[dict[str, torch.Tensor]]:
    inputs, targets = dataset()
    generator = torch.Generator().manual_seed(seed)
    while True:
        index = torch.randint(0, len(inputs), (MICRO,), generator=generator)
        yield {"inputs": inputs[index], "targets": targets[index]}


def loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    time.sleep(0.01)  # a microbatch takes time (see test_collaborative.mse)
    return torch.nn.functional.mse_loss(model(batch["inputs"]), batch["targets"])


def trainer(node: Node, receipts: bool = True) -> tuple[DedlocOptimizer, torch.nn.Module]:
    model = fresh_model()
    config = DedlocConfig(target_batch_size=TARGET, keep_receipts=receipts)
    return DedlocOptimizer(TrainingState(model, make_optimizer(model)), node.links, config), model


def credited(reported: list[EpochMetrics]) -> dict[str, dict[int, int]]:
    """Samples credited per peer and epoch in the backbone's reports."""
    found: dict[str, dict[int, int]] = defaultdict(dict)
    for metrics in reported:
        for part in metrics.contributions:
            found[part.peer][metrics.epoch] = part.samples
    return found


async def checking_backbone(
    nodes, **config: Any
) -> tuple[Node, DedlocBackbone, list[EpochMetrics]]:
    """A backbone node and its backbone checking every epoch, with what it reports (``config``:
    more of its ``DedlocBackboneConfig``)."""
    backbone = await nodes(None, backbone=True)
    model = fresh_model()
    reported: list[EpochMetrics] = []
    aux = DedlocBackbone(
        TrainingState(model, make_optimizer(model)),
        backbone.links,
        DedlocBackboneConfig(target_batch_size=TARGET, **config),
        on_metrics=reported.append,
        work_checks=WorkChecks(1.0, loss),
    )
    return backbone, aux, reported


@contextlib.asynccontextmanager
async def running(aux: DedlocBackbone) -> AsyncIterator[None]:
    """The backbone's loop for the length of the block; stopped, and waited for, at its end."""
    stop = asyncio.Event()
    task = asyncio.create_task(aux.run(stop), name="test/backbone")
    try:
        yield
    finally:
        stop.set()
        await task


@pytest.mark.parametrize(
    ("attack", "statistic", "serves"),
    [
        (Misbehaviour(Attack.SCALE, 1.0, computes=0.0), "work_gradient", True),  # computes nothing
        (Misbehaviour(Attack.SCALE, 1.0, computes=0.1), "work_gradient", True),  # a tenth
        (Misbehaviour(Attack.SCALE, 1.0, claim=10.0), "work_unbacked", True),  # claims 10x more
        # serves no receipts: the backbone's calls are answered "no such method"
        (Misbehaviour(Attack.SCALE, 1.0, computes=0.0), "work_refused", False),
    ],
)
async def test_a_peer_lying_about_its_work_is_caught_and_credited_nothing(
    nodes,
    attack: Misbehaviour,
    statistic: str,
    serves: bool,
) -> None:
    backbone, aux, reported = await checking_backbone(nodes)
    assert aux.checker is not None
    async with running(aux):
        members = [await nodes(backbone.address) for _ in range(3)]
        peers = [trainer(node, receipts=serves or i < 2) for i, node in enumerate(members)]
        liar, _ = peers[2]
        attack.install(liar, members[2].averager)
        for optimizer, _ in peers:
            await optimizer.start()
        await asyncio.wait_for(
            asyncio.gather(
                *(
                    Trainer(
                        m, o, n.bridge, batches(10 + i), loss, witness=o.keep_receipts("float32")
                    ).run(until_epoch=EPOCHS)
                    for i, ((o, m), n) in enumerate(zip(peers, members, strict=True))
                )
            ),
            timeout=240,
        )
        ids = [str(n.averager.host.peer_id) for n in members]
        claimed = {
            peer: {item.epoch: item.samples for item in o.landed.items()}
            for peer, (o, _) in zip(ids, peers, strict=True)
        }

        # every honest claim is credited once a check vouched for it
        try:
            await wait_until(lambda: all(credited(reported)[p] == claimed[p] for p in ids[:2]), 60)
        except TimeoutError:
            checks = "\n".join(map(str, aux.checker.records))
            pytest.fail(
                f"claimed {claimed}, credited {dict(credited(reported))}; checks:\n{checks}"
            )
        records = aux.checker.records
        by_peer = {p: [r.verdict for r in records if r.peer == p] for p in ids}
        for honest in ids[:2]:
            assert by_peer[honest]
            assert set(by_peer[honest]) == {"passed"}
        assert by_peer[ids[2]][0] == "caught"  # at its first epoch
        assert aux.checker.standings.of(ids[2]).caught
        assert sum(claimed[ids[2]].values()) > 0
        assert credited(reported).get(ids[2], {}) == {}  # nothing of what it claimed

        # the accusation is signed and published, like a round's findings
        await wait_until(
            lambda: any(r.evidence.statistic == statistic for r in aux.accusations), 60
        )
        accused = {str(r.evidence.accused) for r in aux.accusations}
        assert accused == {ids[2]}
        for optimizer, _ in peers:
            await optimizer.close()


async def test_a_trainer_that_turns_free_rider_loses_the_credit_it_was_given_on_trust(
    nodes,
) -> None:
    # checked at every epoch until it is vouched for, then at none while it skips its work, then
    # at every epoch again: the check that catches it takes back what it was credited unchecked
    backbone, aux, reported = await checking_backbone(nodes)
    assert aux.checker is not None
    standings = aux.checker.standings
    async with running(aux):
        members = [await nodes(backbone.address) for _ in range(3)]
        peers = [trainer(node) for node in members]
        for optimizer, _ in peers:
            await optimizer.start()
        witnesses = [o.keep_receipts("float32") for o, _ in peers]
        turncoat, turned = peers[2][0], threading.Event()
        assert turncoat.work is not None
        assert witnesses[2] is not None
        honest, cheat = witnesses[2], FreeRider(0.0)(turncoat.work)

        def turncoat_witness(batch: object, value: float) -> None:
            (cheat if turned.is_set() else honest)(batch, value)

        witnesses[2] = turncoat_witness
        runs = asyncio.gather(
            *(
                Trainer(m, o, n.bridge, batches(10 + i), loss, witness=w).run(until_epoch=16)
                for i, ((o, m), n, w) in enumerate(zip(peers, members, witnesses, strict=True))
            )
        )
        ids = [str(n.averager.host.peer_id) for n in members]
        mine = standings.of(ids[2])

        def net() -> dict[int, int]:
            """The turncoat's credit per epoch, less what was withdrawn."""
            found: dict[int, int] = defaultdict(int)
            for metrics in reported:
                for part in metrics.contributions:
                    if part.peer == ids[2]:
                        found[metrics.epoch] += -part.samples if metrics.withdrawn else part.samples
            return found

        await wait_until(lambda: mine.vouched >= 1, 120)
        standings.rate = 1e-12  # vouched for: its epochs are credited unchecked from here on
        turned.set()
        trusted_from = turncoat.epoch + 1
        await wait_until(lambda: max(net(), default=-1) >= trusted_from + 1, 120)
        vouched = mine.vouched
        assert not mine.caught
        unchecked = {e: n for e, n in net().items() if e > vouched}
        assert sum(unchecked.values()) > 0, net()  # credited on trust
        standings.rate = 1.0
        await wait_until(lambda: mine.caught, 120)
        await wait_until(lambda: any(m.withdrawn for m in reported), 60)
        await asyncio.wait_for(runs, 240)
        await asyncio.sleep(2.0)  # the last records read
        withdrawn = {m.epoch for m in reported if m.withdrawn}
        assert withdrawn
        assert min(withdrawn) > vouched
        # a check already under way when it turned may have vouched for one more honest epoch
        vouched = mine.vouched
        assert {e for e in unchecked if e > vouched} <= withdrawn
        after = net()
        assert all(after[e] == 0 for e in after if e > vouched), after
        assert sum(after[e] for e in after if e <= vouched) > 0  # what checks vouched for stays
        assert aux.checker.standings.of(ids[0]).withdrawn is False
        assert not any(
            part.peer != ids[2] for m in reported if m.withdrawn for part in m.contributions
        )
        for optimizer, _ in peers:
            await optimizer.close()


async def test_a_trainer_that_hides_from_the_checks_of_the_epochs_it_faked_is_paid_nothing_for_them(
    nodes,
) -> None:
    """Honest for its first epochs, which its checks pass; from ``FAKES_FROM`` on it computes
    nothing and answers "busy" to every check of those epochs (``Hider``), as a member that drops
    the calls would time out. Each such check stays open and is made again, its claims wait, and
    when the backbone can no longer check the epoch what trust paid it since its last passed check
    is taken back. Nobody is accused: an honest member that cannot be reached looks the same."""
    fakes_from = 3
    backbone, aux, reported = await checking_backbone(nodes)
    assert aux.checker is not None
    standings = aux.checker.standings
    async with running(aux):
        members = [await nodes(backbone.address) for _ in range(3)]
        peers = [trainer(node) for node in members]
        hider = Misbehaviour(Attack.SCALE, 1.0, computes=0.0, rides_from=fakes_from, hides=True)
        hider.install(peers[2][0], members[2].averager)
        for optimizer, _ in peers:
            await optimizer.start()
        await asyncio.wait_for(
            asyncio.gather(
                *(
                    Trainer(
                        m, o, n.bridge, batches(10 + i), loss, witness=o.keep_receipts("float32")
                    ).run(until_epoch=fakes_from + 8)
                    for i, ((o, m), n) in enumerate(zip(peers, members, strict=True))
                )
            ),
            timeout=240,
        )
        await asyncio.sleep(2.0)  # the last records read
        ids = [str(n.averager.host.peer_id) for n in members]
        mine = standings.of(ids[2])
        net: dict[int, int] = defaultdict(int)
        for metrics in reported:
            for part in metrics.contributions:
                if part.peer == ids[2]:
                    net[metrics.epoch] += -part.samples if metrics.withdrawn else part.samples
        assert all(net[e] == 0 for e in net if e >= fakes_from), dict(net)
        assert sum(net[e] for e in net if e < fakes_from) > 0  # what checks vouched for stays
        assert not mine.caught
        assert not aux.accusations
        records = aux.checker.records
        hidden = [r for r in records if r.peer == ids[2] and r.epoch >= fakes_from]
        assert hidden
        assert {r.verdict for r in hidden} == {"unreached"}
        assert len(hidden) > len({r.epoch for r in hidden})  # made again
        for honest in ids[:2]:
            assert not standings.of(honest).withdrawn
            assert {r.verdict for r in records if r.peer == honest} == {"passed"}
        for optimizer, _ in peers:
            await optimizer.close()


def twice(seed: int) -> Iterator[dict[str, torch.Tensor]]:
    """Each batch twice in a row: data that repeats within an epoch."""
    for batch in batches(seed):
        yield batch
        yield {name: t.clone() for name, t in batch.items()}


async def test_honest_trainers_whose_data_repeats_are_not_accused(nodes) -> None:
    backbone, aux, reported = await checking_backbone(nodes)
    assert aux.checker is not None
    async with running(aux):
        members = [await nodes(backbone.address) for _ in range(3)]
        peers = [trainer(node) for node in members]
        for optimizer, _ in peers:
            await optimizer.start()
        loops = [
            Trainer(m, o, n.bridge, twice(10 + i), loss, witness=o.keep_receipts("float32"),
                    fresh=o.fresh)
            for i, ((o, m), n) in enumerate(zip(peers, members, strict=True))
        ]  # fmt: skip
        await asyncio.wait_for(
            asyncio.gather(*(loop.run(until_epoch=EPOCHS) for loop in loops)), timeout=240
        )
        assert all(loop.repeats > 0 for loop in loops)  # every trainer met its data again
        ids = [str(n.averager.host.peer_id) for n in members]
        claimed = {
            peer: {item.epoch: item.samples for item in o.landed.items()}
            for peer, (o, _) in zip(ids, peers, strict=True)
        }

        await wait_until(lambda: all(credited(reported)[p] == claimed[p] for p in ids), 60)
        verdicts = {r.verdict for r in aux.checker.records}
        assert verdicts == {"passed"}, aux.checker.records
        assert not aux.accusations
        for optimizer, _ in peers:
            await optimizer.close()


async def test_a_trainer_whose_state_went_apart_is_not_accused(nodes) -> None:
    """One honest trainer's parameters leave the others' at epoch 2 (as when a state round it
    missed left it apart from the backbone's replica): its gradients are not judged at
    parameters it did not compute at, nobody is accused, and once the next state round brings
    everyone back in step its checks pass again and every claim is credited."""
    backbone, aux, reported = await checking_backbone(nodes, average_state_every=4)
    assert aux.checker is not None
    async with running(aux):
        members = [await nodes(backbone.address) for _ in range(3)]
        peers = []
        for node in members:
            m = fresh_model()
            config = DedlocConfig(
                target_batch_size=TARGET, average_state_every=4, keep_receipts=True
            )
            peers.append(
                (DedlocOptimizer(TrainingState(m, make_optimizer(m)), node.links, config), m)
            )
        apart, apart_model = peers[2]
        pushed: list[int] = []

        def pushed_apart(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
            if apart.epoch == 2 and not pushed:  # on the training thread, between steps
                pushed.append(apart.epoch)
                with torch.no_grad():
                    for p in apart_model.parameters():
                        p.mul_(1.01)
            return loss(model, batch)

        for optimizer, _ in peers:
            await optimizer.start()
        await asyncio.wait_for(
            asyncio.gather(
                *(
                    Trainer(m, o, n.bridge, batches(10 + i), pushed_apart if i == 2 else loss,
                            witness=o.keep_receipts("float32")).run(until_epoch=8)
                    for i, ((o, m), n) in enumerate(zip(peers, members, strict=True))
                )
            ),
            timeout=240,
        )  # fmt: skip
        assert pushed
        ids = [str(n.averager.host.peer_id) for n in members]
        claimed = {
            peer: {item.epoch: item.samples for item in o.landed.items()}
            for peer, (o, _) in zip(ids, peers, strict=True)
        }
        await wait_until(lambda: all(credited(reported)[p] == claimed[p] for p in ids), 60)
        records = aux.checker.records
        verdicts = {p: {r.epoch: r.verdict for r in records if r.peer == p} for p in ids}
        assert "apart" in verdicts[ids[2]].values(), verdicts
        assert "caught" not in {v for found in verdicts.values() for v in found.values()}
        assert verdicts[ids[2]][max(verdicts[ids[2]])] == "passed", verdicts  # back in step
        assert not aux.accusations
        for optimizer, _ in peers:
            await optimizer.close()
