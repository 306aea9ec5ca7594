"""Rollback orders: signed and checked, forged or replayed ones ignored, checkpoints kept for them,
states from before them refused, and a small collaboration put back on checkpoint N with its
epochs numbered on."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from app.wording import describe_event
from core.api.events import Event, RolledBack
from core.averaging.sharing.state import StateDownloadError, StateSharing
from core.averaging.sharing.vouching import Vouching
from core.engine.events import EventBus
from core.engine.peer_events import PeerEvents
from core.net import Identity
from core.training.checkpoints import CheckpointStore
from core.training.dedloc.backbone import DedlocBackboneConfig
from core.training.dedloc.optimizer import DedlocConfig
from core.training.errors import CheckpointError
from core.training.links import PeerLinks
from core.training.local import LocalWork
from core.training.moderation.rollback import OrderReader, applied_of, round_key
from core.training.rollback_replica import ReplicaRollback
from core.training.rollback_replica import RolledBack as Applied
from core.training.trainer import Trainer
from core.trust.rollback import (
    MAX_ORDER_CHARS,
    RollbackOrder,
    RollbackRefused,
    order_from_text,
    order_to_text,
    sign_order,
)
from core.util.errors import WireFormatError
from core.worker.events import PeerRolledBack, from_json, to_json
from tests.conftest import MakeHost
from tests.support.leaks import poll_until, wait_until
from tests.training.conftest import MakePeer, close_aux, start_aux, start_node
from tests.training.dedloc.test_collaborative import (
    Recorder,
    dataset,
    fresh_model,
    make_optimizer,
    mse,
)

PROJECT = "rollback-test"


def order(
    key: Identity,
    sequence: int = 1,
    to_epoch: int = 2,
    *,
    reason: str = "diverged",
    project: str = PROJECT,
) -> RollbackOrder:
    return sign_order(
        key, project, sequence=sequence, to_epoch=to_epoch, issued=1.7e9, reason=reason
    )


# ---- the order ---------------------------------------------------------------------------------


def test_an_order_survives_its_text_and_the_project_key_verifies_it() -> None:
    key = Identity.generate()
    signed = order(key, 3, 40, reason="loss exploded at epoch 57")
    back = order_from_text(order_to_text(signed))
    assert back == signed
    back.check(PROJECT, key.peer_id)
    assert back.describe() == (
        "rollback #3 to the checkpoint of epoch 40: loss exploded at epoch 57"
    )
    with pytest.raises(ValueError, match="epoch is 0 or more"):
        order(key, to_epoch=-1)
    with pytest.raises(ValueError, match="sequence starts at 1"):
        order(key, sequence=0)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"to_epoch": 0}, "not signed by the project key"),
        ({"sequence": 9}, "not signed by the project key"),
        ({"reason": "nothing happened"}, "not signed by the project key"),
        ({"project": "another-project"}, "is for project 'another-project'"),
    ],
)
def test_an_altered_order_is_refused(change: dict[str, object], says: str) -> None:
    key = Identity.generate()
    altered = dataclasses.replace(order(key), **change)  # type: ignore[arg-type]
    with pytest.raises(RollbackRefused, match=says):
        altered.check(PROJECT, key.peer_id)


def test_an_order_signed_by_another_key_or_for_another_project_is_refused() -> None:
    key, forger = Identity.generate(), Identity.generate()
    with pytest.raises(RollbackRefused, match="not signed by the project key"):
        order(forger).check(PROJECT, key.peer_id)
    with pytest.raises(RollbackRefused, match="is for project 'elsewhere'"):
        order(key, project="elsewhere").check(PROJECT, key.peer_id)


@pytest.mark.parametrize(
    "text",
    ["", "not base64 at all!", "x" * (MAX_ORDER_CHARS + 1), None, 12, "kwE"],
    ids=["empty", "garbage", "too-long", "none", "number", "short-list"],
)
def test_malformed_order_texts_are_refused(text: object) -> None:
    with pytest.raises(WireFormatError):
        order_from_text(text)


def test_the_reader_ignores_forged_and_replayed_orders_with_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    key, forger = Identity.generate(), Identity.generate()
    served: list[str | None] = [None]
    reader = OrderReader(lambda: served[0], PROJECT, key.peer_id)
    assert reader.pending(applied=0) is None

    first = order(key, 1, 4)
    served[0] = order_to_text(first)
    assert reader.pending(applied=0) == first
    assert reader.pending(applied=1) is None  # applied: the coordinator still serves it, quietly

    caplog.set_level(logging.WARNING, "core.training.moderation.rollback")
    served[0] = order_to_text(order(forger, 2, 0))
    assert reader.pending(applied=1) is None
    assert reader.pending(applied=1) is None
    forged = [r for r in caplog.records if "ignored a rollback order" in r.getMessage()]
    assert len(forged) == 1  # once per text, not once per microbatch
    assert "not signed by the project key" in forged[0].getMessage()

    caplog.clear()
    served[0] = order_to_text(first)  # an old order served again to a replica past it
    assert reader.pending(applied=2) is None
    assert any("replayed" in r.getMessage() for r in caplog.records)

    served[0] = "garbage"
    assert reader.pending(applied=0) is None
    assert any("not a rollback order" in r.getMessage() for r in caplog.records)


def test_what_a_replica_remembers_and_how_rounds_are_named() -> None:
    assert applied_of({"epoch": 3}) == 0  # a peer from before rollbacks
    assert applied_of({"rollback": 2}) == 2
    assert applied_of({"rollback": True}) == 0
    assert applied_of({"rollback": -1}) == 0
    assert applied_of(None) == 0
    assert round_key("grads", 12, 0) == "grads.12"  # what peers from before rollbacks use
    assert round_key("grads", 12, 2) == "grads.r2.12"
    assert round_key("state", 5, 1) != round_key("state", 5, 0)


def test_the_event_log_says_what_the_moderators_did() -> None:
    """The peer's event, its JSON line (``barnraise peer``), the engine's API event, the words."""
    event = PeerRolledBack(40, 58, 3, "loss exploded", "peer(s) ...abc")
    line = to_json(event)
    assert line["event"] == "rollback"
    assert from_json(json.loads(json.dumps(line))) == event
    bus = EventBus()
    PeerEvents(bus, asyncio.Event(), None, None, None).handle("demo", event)  # type: ignore[arg-type]
    (published,) = bus.recent()
    assert published.data == RolledBack("demo", 40, 58, "loss exploded")
    assert Event.from_wire(published.to_wire()) == published
    words = "Rolled back to the checkpoint of epoch 40 by the moderators: loss exploded; "
    assert describe_event(published) == ("Rollback", words + "training goes on at epoch 58")


# ---- keeping the checkpoints a rollback needs ------------------------------------------------


def save_epochs(store: CheckpointStore, epochs: range) -> list[int]:
    for epoch in epochs:
        store.save(epoch, {"w": torch.full((2,), float(epoch))}, {}, {"epoch": epoch}, 1.0)
    return [CheckpointStore.load(p).epoch for p in store.list()]


def test_milestones_keep_older_checkpoints_for_rollbacks(tmp_path: Path) -> None:
    plain = CheckpointStore(tmp_path / "plain", keep=2)
    assert save_epochs(plain, range(1, 14)) == [12, 13]
    store = CheckpointStore(tmp_path / "milestones", keep=2, milestone_every=4, milestones=2)
    # the last two, and the two newest multiples of 4 (12 is both)
    assert save_epochs(store, range(1, 14)) == [8, 12, 13]
    with pytest.raises(CheckpointError, match="0 or more"):
        CheckpointStore(tmp_path, milestone_every=-1)


# ---- states from before a rollback -------------------------------------------------------------


async def test_a_state_from_before_a_rollback_is_never_downloaded(make_host: MakeHost) -> None:
    """A straggler that has not rolled back yet may be ahead: its state must not undo ours."""
    nodes = [await start_node(make_host, None)]
    nodes += [await start_node(make_host, str(nodes[0][0].addresses[0])) for _ in range(2)]
    try:
        stale, rolled, me = (StateSharing(host, dht, "test") for host, dht in nodes)
        stale.serve(lambda: (9, {"epoch": 9, "rollback": 0}, [np.full(10, 9.0, np.float32)]))
        rolled.serve(lambda: (6, {"epoch": 6, "rollback": 1}, [np.full(10, 6.0, np.float32)]))
        assert await stale.announce(9)
        assert await rolled.announce(6)
        # one donor per epoch, each taken at its word: what is tested here is the filter
        one = Vouching(networks=1)
        assert (await me.download(timeout=20, vouching=one)).version == 9  # unfiltered: newest
        got = await me.download(timeout=20, accept=lambda meta: applied_of(meta) >= 1, vouching=one)
        assert (got.version, got.metadata) == (6, {"epoch": 6, "rollback": 1})
        np.testing.assert_array_equal(got.tensors[0], np.full(10, 6.0, np.float32))
        with pytest.raises(StateDownloadError, match="not one to load"):
            await me.download(timeout=20, accept=lambda meta: applied_of(meta) >= 2, vouching=one)
    finally:
        for _, dht in nodes:
            await dht.close()


# ---- a collaboration rolled back ----------------------------------------------------------------


async def test_every_replica_lands_on_the_checkpoint_and_epochs_go_on(
    make_peer: MakePeer, make_host: MakeHost, tmp_path: Path
) -> None:
    key = Identity.generate()
    served: list[str | None] = [None]  # what the pass keepers would leave on each peer's gate
    applied: dict[str, list[Applied]] = {}

    def follow(
        name: str, local: LocalWork, links: PeerLinks, store: CheckpointStore | None = None
    ) -> ReplicaRollback:
        reader = OrderReader(lambda: served[0], PROJECT, key.peer_id)
        record = applied.setdefault(name, []).append
        return ReplicaRollback(reader, local, links, checkpoints=store, on_applied=record)

    data = dataset()
    config = DedlocConfig(target_batch_size=128, average_state_every=0)
    peers = []
    for i in range(2):
        model = fresh_model()
        peers.append(await make_peer(model, make_optimizer(model), config))
        peers[i].optimizer.rollback = follow(
            f"trainer{i}", peers[i].optimizer.local, peers[i].optimizer.links
        )
    store = CheckpointStore(tmp_path / "checkpoints", keep=10)
    aux_model = fresh_model()
    aux = await start_aux(
        peers[0],
        make_host,
        model=aux_model,
        optimizer=make_optimizer(aux_model),
        config=DedlocBackboneConfig(target_batch_size=128, checkpoint_every=2),
        checkpoints=store,
    )
    aux.peer.rollback = follow("aux", aux.peer.local, aux.peer.links, store)
    stop = asyncio.Event()
    aux_task = asyncio.create_task(aux.peer.run(stop))
    walks = [Recorder(data, 40 + i, peer) for i, peer in enumerate(peers)]

    async def train(until: int) -> None:
        await asyncio.wait_for(
            asyncio.gather(
                *(
                    Trainer(p.model, p.optimizer, p.bridge, walks[i], mse).run(until_epoch=until)
                    for i, p in enumerate(peers)
                )
            ),
            timeout=60,
        )

    replicas = [peers[0].optimizer.state, peers[1].optimizer.state, aux.peer.state]
    try:
        me = str(aux.averager.host.peer_id)
        await poll_until(
            peers[0].optimizer.board.fetch, lambda seen: any(r.peer == me for r in seen)
        )
        await train(5)
        await wait_until(lambda: len(store.list()) >= 2 and aux.peer.state.epoch >= 5)
        target = store.list()[0]  # an older checkpoint than the state the peers hold now
        checkpoint = CheckpointStore.load(target)
        before = max(state.epoch for state in replicas)
        assert checkpoint.epoch < before

        served[0] = order_to_text(order(key, 1, checkpoint.epoch))
        await train(before + 1)  # the first microbatch meets the order: no step before it
        await wait_until(lambda: all(applied.values()))

        # every replica holds checkpoint N's state, at one and the same new epoch
        epoch = replicas[0].epoch
        assert epoch > before  # numbered on, never back
        for state in replicas:
            assert (state.epoch, state.rollback) == (epoch, 1)
            for name, tensor in state.model.state_dict().items():
                torch.testing.assert_close(tensor, checkpoint.model[name], rtol=0, atol=0)
        for state in replicas[1:]:
            for mine, theirs in zip(
                state.averaged_tensors(), replicas[0].averaged_tensors(), strict=True
            ):
                torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
        assert [d.order.to_epoch for d in applied["aux"]] == [checkpoint.epoch]
        assert "checkpoint" in applied["aux"][0].source  # the backbone loaded its own file
        for name in ("trainer0", "trainer1"):  # the trainers downloaded it, once each
            assert [(d.order.sequence, d.epoch) for d in applied[name]] == [(1, epoch)]
            assert "peer" in applied[name][0].source

        # training goes on from there, in rounds (``grads.r1.<epoch>``) only rolled-back peers
        # join: the trainers and the backbone together (a busy machine may make one miss a round)
        await train(epoch + 2)
        for peer in peers:
            assert (peer.optimizer.epoch, peer.optimizer.state.rollback) == (epoch + 2, 1)
        rounds = [r for p in peers for r in p.optimizer.reports if r.epoch >= epoch]
        assert any(r.group_size == 3 for r in rounds), rounds
        # an order applies once: served again, or to a peer whose state already went through it
        assert [len(done) for done in applied.values()] == [1, 1, 1]
        late_model = fresh_model()
        late = await make_peer(late_model, make_optimizer(late_model), config, start=False)
        late.optimizer.rollback = follow("late", late.optimizer.local, late.optimizer.links)
        await late.optimizer.start()  # catches up: the rolled-back state, after the order
        assert (late.optimizer.state.rollback, late.optimizer.epoch) == (1, epoch + 2)
        assert late.optimizer.rollback.pending() is None
        assert applied["late"] == []  # it caught up: nothing of its own went back
    finally:
        stop.set()
        await aux_task
        await close_aux(aux)
