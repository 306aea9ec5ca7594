"""Receipts for expert work on loopback: a real trainer layer calls real expert servers, signs
receipts for what each answered, and each server keeps the newest after checking it; the server's
refusals (wrong sender, project, server, signature, more than it served) are clear errors."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import torch

from core.dht import DHTConfig, DHTNode, HostTransport
from core.moe.announce import announcement
from core.moe.client.beam_search import MoEBeamSearch
from core.moe.client.layer import RemoteMixtureOfExperts
from core.moe.client.receipts import ReceiptSender
from core.moe.grid import ExpertGrid
from core.moe.protocol import RECEIPT, ReceiptRequest
from core.moe.remote import RemoteExpert
from core.moe.server.events import ExpertsEvent, ExpertsReady
from core.moe.server.experts import ExpertSpec
from core.moe.server.receipts import MAX_SESSIONS, ReceiptBook
from core.moe.server.runtime import ExpertHost, ExpertHostSettings
from core.moe.server.server import ExpertServer
from core.net import Host, Identity
from core.net.errors import InvalidRequestError
from core.project import parse_dmoe_manifest
from core.trust.peer_id import PeerID
from core.trust.receipts import Receipt, sign_receipt
from core.util.clock import FakeClock
from core.worker.bridge import TrainingBridge
from tests.conftest import MakeHost
from tests.moe.client.test_beam_search import FakeDHT
from tests.support.leaks import wait_until
from tests.support.small_dmoe import MANIFEST

PROJECT = "digits-moe"
GRID = ExpertGrid("lin", (2, 2))
HIDDEN = 4
SPEC = ExpertSpec(kind="linear", hidden=HIDDEN, optimizer="sgd", lr=0.1, max_batch=64)


@dataclass
class Loopback:
    make_host: MakeHost
    server_bridge: TrainingBridge
    bridge: TrainingBridge
    dht: FakeDHT = field(default_factory=FakeDHT)
    servers: list[ExpertServer] = field(default_factory=list)
    senders: list[ReceiptSender] = field(default_factory=list)

    async def serve(self, uids: list[str], *, project: str = PROJECT) -> tuple[Host, ReceiptBook]:
        host = await self.make_host()
        book = ReceiptBook(project, host.peer_id)
        backends = [SPEC.backend(uid) for uid in uids]
        server = ExpertServer(host, self.server_bridge, backends, max_wait=0.005, receipts=book)
        await server.start()
        self.servers.append(server)
        for uid in uids:
            address = str(host.addresses[0])
            await self.dht.store_many(announcement(GRID, [uid], address, 1e12, self.dht.peer_id))
        return host, book

    async def trainer(self, **options: float) -> tuple[Host, ReceiptSender, RemoteMixtureOfExperts]:
        host = await self.make_host()
        sender = ReceiptSender(host, PROJECT, **options)
        self.senders.append(sender)
        torch.manual_seed(0)
        layer = RemoteMixtureOfExperts(
            hidden=HIDDEN,
            grid=GRID,
            host=host,
            bridge=self.bridge,
            search=MoEBeamSearch(self.dht, GRID, clock=FakeClock()),
            k=2,
            beam_size=GRID.size,
            receipts=sender,
        )
        return host, sender, layer

    async def step(self, layer: RemoteMixtureOfExperts, rows: int) -> None:
        """One forward and backward of ``rows`` inputs through the remote experts."""
        x = torch.randn(rows, HIDDEN, requires_grad=True)
        out = await self.bridge.run(layer, x)
        assert isinstance(out, torch.Tensor)
        await self.bridge.run(lambda: out.sum().backward())


@pytest.fixture
async def loopback(make_host: MakeHost) -> AsyncIterator[Loopback]:
    server_bridge = TrainingBridge("experts")
    bridge = TrainingBridge("trainer", workers=2)
    running = Loopback(make_host, server_bridge, bridge)
    yield running
    for sender in running.senders:
        await sender.close()
    for server in running.servers:
        await server.close()
    await bridge.aclose()
    await server_bridge.aclose()


def newest(book: ReceiptBook, trainer: Host, sender: ReceiptSender) -> Receipt:
    receipt = book.newest(trainer.peer_id, sender.session)
    assert receipt is not None
    return receipt


async def test_servers_keep_verified_receipts_equal_to_what_they_served(
    loopback: Loopback,
) -> None:
    host_a, book_a = await loopback.serve(["lin.0.0", "lin.0.1"])
    host_b, book_b = await loopback.serve(["lin.1.0", "lin.1.1"])
    trainer, sender, layer = await loopback.trainer()
    await loopback.step(layer, 5)
    await loopback.step(layer, 3)
    assert await sender.flush() == 2  # one receipt per server, both answered

    served = 0
    for host, book in ((host_a, book_a), (host_b, book_b)):
        receipt = newest(book, trainer, sender)
        receipt.verify()
        assert (receipt.project, receipt.server, receipt.trainer) == (
            PROJECT,
            host.peer_id,
            trainer.peer_id,
        )
        totals = (receipt.forward_samples, receipt.backward_samples)
        assert totals == book.served_to(trainer.peer_id) == sender.totals(host.peer_id)
        assert book.take() == [receipt]
        served += receipt.samples
    assert served == 2 * (5 + 3) * 2  # k = 2 experts per row, forward and backward

    # nothing new: no receipt; new work: a newer receipt with the new totals, taken once
    assert await sender.flush() == 0
    await loopback.step(layer, 4)
    first = newest(book_a, trainer, sender)
    await sender.flush()
    second = newest(book_a, trainer, sender)
    assert second.sequence > first.sequence
    assert (second.forward_samples, second.backward_samples) == book_a.served_to(trainer.peer_id)
    assert book_a.take() == [second]
    assert book_a.take() == []


async def test_receipts_go_out_in_the_background_and_at_close(loopback: Loopback) -> None:
    _, book = await loopback.serve(["lin.0.0", "lin.0.1", "lin.1.0", "lin.1.1"])
    trainer, sender, layer = await loopback.trainer(interval=0.05)
    sender.start()
    await loopback.step(layer, 6)

    def held() -> int:
        receipt = book.newest(trainer.peer_id, sender.session)
        return 0 if receipt is None else receipt.samples

    await wait_until(lambda: held() == 24)  # 6 rows, 2 experts each, forward and backward
    await loopback.step(layer, 2)
    await sender.close()  # the last round before the trainer's host goes away
    assert newest(book, trainer, sender).samples == 32
    assert sender.sent >= 2


async def test_refused_unreachable_and_receiptless_servers(
    loopback: Loopback, make_host: MakeHost
) -> None:
    _, book = await loopback.serve(["lin.0.0", "lin.0.1", "lin.1.0", "lin.1.1"], project="other")
    trainer, sender, layer = await loopback.trainer()
    await loopback.step(layer, 2)
    assert await sender.flush() == 1  # answered: refused, for another project
    assert sender.refused == 1
    assert book.refused == 1
    assert await sender.flush() == 0  # not handed again until the totals grow

    # a server that takes no receipts answers "unknown method": not asked again either
    plain_host = await make_host()
    plain = ExpertServer(plain_host, loopback.server_bridge, [SPEC.backend("lin.0.0")])
    await plain.start()
    loopback.servers.append(plain)
    sender.count(str(plain_host.addresses[0]), "forward", 3)
    assert await sender.flush() == 1
    assert sender.refused == 2

    # unreachable: kept for the next round, which carries the totals so far
    gone = Identity.generate().peer_id
    sender.count(f"/ip4/127.0.0.1/tcp/1/p2p/{gone}", "forward", 5)
    assert await sender.flush() == 0
    sender.count(f"/ip4/127.0.0.1/tcp/1/p2p/{gone}", "backward", 5)
    assert await sender.flush() == 0
    assert sender.totals(gone) == (5, 5)
    # addresses without a PeerID, and the trainer's own, are not counted
    sender.count("/ip4/127.0.0.1/tcp/1", "forward", 5)
    sender.count(f"/ip4/127.0.0.1/tcp/1/p2p/{trainer.peer_id}", "forward", 5)
    sender.count("garbage", "forward", 5)
    assert sender.totals(trainer.peer_id) == (0, 0)


async def test_bad_receipts_get_clear_errors_over_the_wire(loopback: Loopback) -> None:
    server, book = await loopback.serve(["lin.0.0", "lin.0.1", "lin.1.0", "lin.1.1"])
    trainer, sender, layer = await loopback.trainer()
    await loopback.step(layer, 2)
    forward, backward = book.served_to(trainer.peer_id)
    address = server.addresses[0]

    def receipt(extra_forward: int = 0) -> Receipt:
        return sign_receipt(
            trainer.identity,
            PROJECT,
            server.peer_id,
            session=sender.session,
            sequence=1,
            forward_samples=forward + extra_forward,
            backward_samples=backward,
        )

    async def hand(request: Receipt) -> bool:
        return (await trainer.call(address, RECEIPT, ReceiptRequest(request))).kept

    with pytest.raises(InvalidRequestError, match="malformed request"):
        await trainer.call_raw(address, RECEIPT.name, [["not", "a", "receipt"]])
    with pytest.raises(InvalidRequestError, match=f"claims {forward + 1} forward samples"):
        await hand(receipt(extra_forward=1))
    forged = dataclasses.replace(receipt(), signature=bytes(64))
    with pytest.raises(InvalidRequestError, match="not signed by the trainer"):
        await hand(forged)
    assert await hand(receipt()) is True
    assert await hand(receipt()) is False  # the same one again: already held
    assert book.refused == 2


def test_the_book_refuses_what_it_cannot_vouch_for() -> None:
    server, trainer, other = Identity.generate(), Identity.generate(), Identity.generate()
    book = ReceiptBook(PROJECT, server.peer_id)
    book.served(trainer.peer_id, "forward", 100)
    book.served(trainer.peer_id, "backward", 100)

    def receipt(
        signer: Identity = trainer,
        *,
        session: bytes = bytes(16),
        sequence: int = 1,
        samples: tuple[int, int] = (100, 100),
        project: str = PROJECT,
        to: PeerID = server.peer_id,
    ) -> Receipt:
        return sign_receipt(
            signer,
            project,
            to,
            session=session,
            sequence=sequence,
            forward_samples=samples[0],
            backward_samples=samples[1],
        )

    refusals = [
        (receipt(), other.peer_id, "handed over by the trainer that signed it"),
        (receipt(project="other"), trainer.peer_id, "for project 'other'"),
        (receipt(to=other.peer_id), trainer.peer_id, "names another server"),
        (receipt(samples=(100, 101)), trainer.peer_id, "claims 101 backward samples"),
    ]
    for bad, sender, why in refusals:
        with pytest.raises(InvalidRequestError, match=why):
            book.accept(bad, sender)
    assert book.refused == len(refusals)
    assert book.receipts == []

    assert book.accept(receipt(samples=(60, 60)), trainer.peer_id)
    assert book.accept(receipt(sequence=2, samples=(100, 100)), trainer.peer_id)
    assert not book.accept(receipt(sequence=1, samples=(60, 60)), trainer.peer_id)  # older
    # a second session of the same trainer may claim only what the first left unclaimed
    with pytest.raises(InvalidRequestError, match="claims 101 forward"):
        book.accept(receipt(session=bytes([1] * 16), samples=(1, 0)), trainer.peer_id)
    book.served(trainer.peer_id, "forward", 1)
    assert book.accept(receipt(session=bytes([1] * 16), samples=(1, 0)), trainer.peer_id)
    assert [r.samples for r in book.take()] == [200, 1]

    # a trainer that floods sessions is refused beyond a few
    book.served(other.peer_id, "forward", 1000)
    for n in range(MAX_SESSIONS):
        fresh = receipt(other, session=n.to_bytes(16, "big"), samples=(1, 0))
        assert book.accept(fresh, other.peer_id)
    with pytest.raises(InvalidRequestError, match="sessions per trainer"):
        book.accept(receipt(other, session=b"\xff" * 16, samples=(1, 0)), other.peer_id)


async def test_an_expert_host_hands_its_receipts_over_regularly_and_at_close(
    make_host: MakeHost,
) -> None:
    backbone = await make_host()
    dht = DHTNode(HostTransport(backbone), DHTConfig())
    await dht.start([])
    handed: list[list[Receipt]] = []
    events: list[ExpertsEvent] = []
    manifest = parse_dmoe_manifest(MANIFEST)
    settings = ExpertHostSettings(
        manifest,
        uids=("ffn.1.0",),
        initial_peers=(str(backbone.addresses[0]),),
        on_receipts=handed.append,
        receipt_interval=0.05,
    )
    server = ExpertHost(settings, events.append)
    try:
        await server.start()
        ready = events[0]
        assert isinstance(ready, ExpertsReady)
        trainer = await make_host()
        sender = ReceiptSender(trainer, manifest.project.name)
        remote = RemoteExpert(trainer, ready.address, "ffn.1.0", timeout=10)
        x = torch.randn(4, 8)
        (out,) = await remote.forward([x])
        sender.count(ready.address, "forward", 4)  # as the trainer's layer counts an answer
        assert await sender.flush() == 1
        await wait_until(lambda: len(handed) == 1)
        await remote.backward([x], [torch.randn_like(out)])
        sender.count(ready.address, "backward", 4)
        await sender.close()
    finally:
        await server.close(save=False)  # hands over what came since the last round
        await dht.close()
    receipts = [receipt for batch in handed for receipt in batch]
    assert [(r.forward_samples, r.backward_samples) for r in receipts] == [(4, 0), (4, 4)]
    assert all(r.trainer == trainer.peer_id for r in receipts)
