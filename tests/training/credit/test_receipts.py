"""Receipts, fingerprints and batches on the wire: what a checker takes from a stranger is bounded."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from core.swarm.byzantine import FreeRider
from core.training.credit.checks.fingerprint import (
    Fingerprinter,
    batch_digest,
    coordinates,
    pack_batch,
    parameters_at,
    relative_distance,
    unpack_batch,
)
from core.training.credit.checks.ledger import Recorder, WorkLedger
from core.training.credit.checks.receipts import (
    FINGERPRINT_BYTES,
    MAX_BATCH_BYTES,
    EpochReceipts,
    SampledBatch,
    WorkReceipt,
)
from core.util.errors import WireFormatError


def receipt(**changes: object) -> WorkReceipt:
    fields: dict[str, object] = {
        "samples": 8,
        "digest": bytes(32),
        "loss": 2.5,
        "fingerprint": bytes(FINGERPRINT_BYTES),
        "params_epoch": 3,
    }
    fields.update(changes)
    return WorkReceipt(**fields)  # type: ignore[arg-type]


def test_a_receipt_survives_the_wire() -> None:
    sent = EpochReceipts(
        4, "bfloat16", [receipt(), receipt(samples=3, parameters=bytes(FINGERPRINT_BYTES))]
    )
    back = EpochReceipts.from_wire(sent.to_wire())
    assert back == sent
    assert back.samples == 11


@pytest.mark.parametrize(
    "changes",
    [
        {"samples": 0},
        {"digest": bytes(31)},
        {"fingerprint": bytes(FINGERPRINT_BYTES - 4)},
        {"loss": float("nan")},
        {"loss": float("inf")},
        {"params_epoch": -1},
        {"parameters": bytes(FINGERPRINT_BYTES + 4)},
    ],
)
def test_a_malformed_receipt_is_refused(changes: dict[str, object]) -> None:
    wire = receipt().to_wire()
    good = receipt()
    names = ["samples", "digest", "loss", "fingerprint", "params_epoch", "parameters"]
    for key, value in changes.items():
        wire[names.index(key)] = value
    with pytest.raises(WireFormatError):
        WorkReceipt.from_wire(wire)
    assert good.samples == 8


def test_an_unknown_precision_is_refused() -> None:
    with pytest.raises(WireFormatError, match="precision"):
        EpochReceipts.from_wire([1, "float8", []])


def test_the_coordinates_are_the_same_everywhere_and_spread_over_tensors() -> None:
    shapes = [(1000, 16), (16,), (16, 4), (4,)]
    first = coordinates(shapes)
    assert first == coordinates(shapes)
    assert len(first) == 64
    assert {tensor for tensor, _ in first} == {0, 1, 2, 3}  # the big one does not take them all
    assert all(0 <= flat < int(np.prod(shapes[t])) for t, flat in first)


def test_the_fingerprint_reads_the_gradient_at_those_coordinates() -> None:
    model = torch.nn.Linear(5, 3)
    params = list(model.parameters())
    model(torch.randn(4, 5)).pow(2).sum().backward()
    read = Fingerprinter(params).read()
    expected = [
        float(params[t].grad.reshape(-1)[flat])
        for t, flat in coordinates([p.shape for p in params])
    ]  # type: ignore[union-attr]
    assert np.allclose(read, expected)


def batch() -> dict[str, torch.Tensor]:
    return {
        "input_ids": torch.randint(0, 1000, (4, 32)),
        "attention_mask": torch.ones(4, 32, dtype=torch.int64),
        "labels": torch.full((4, 32), -100),
    }


def test_a_batch_comes_back_whole_and_compressed() -> None:
    sent = batch()
    packed = SampledBatch.from_wire(pack_batch(sent).to_wire())
    assert len(packed.data) < 3 * 4 * 32 * 8 / 2
    back = unpack_batch(packed)
    assert batch_digest(back) == batch_digest(sent)
    assert all(torch.equal(back[k], sent[k]) for k in sent)


@pytest.mark.parametrize(
    ("low", "high", "travels"),
    [
        (-100, 120, "int8"),  # labels of a tiny vocabulary
        (-100, 4095, "int16"),  # the demo's labels
        (0, 50_000, "int32"),  # a GPT-2 vocabulary
        (0, 1 << 40, "int64"),  # nothing narrower holds it
    ],
)
def test_integers_travel_in_the_narrowest_signed_integers_that_hold_them(
    low: int, high: int, travels: str
) -> None:
    sent = {"ids": torch.tensor([[low, high], [0, 1]]), "mask": torch.ones(2, 2, dtype=torch.int32)}
    packed = SampledBatch.from_wire(pack_batch(sent).to_wire())
    assert packed.dtypes == ["int64", "int32"]
    assert packed.stored == [travels, "int8"]
    back = unpack_batch(packed)
    assert {k: v.dtype for k, v in back.items()} == {"ids": torch.int64, "mask": torch.int32}
    assert batch_digest(back) == batch_digest(sent)  # the receipt's digest is of the batch itself


def test_a_batch_of_an_older_peer_travels_in_its_own_dtypes() -> None:
    """No stored dtypes: every tensor's bytes in its own dtype (as peers packed them before)."""
    sent = batch()
    raw = b"".join(sent[n].numpy().tobytes() for n in sorted(sent))
    older = SampledBatch(sorted(sent), ["int64"] * 3, [[4, 32]] * 3, zlib.compress(raw))
    back = unpack_batch(SampledBatch.from_wire(older.to_wire()[:4]))
    assert batch_digest(back) == batch_digest(sent)


def test_a_digest_changes_with_any_token() -> None:
    one = batch()
    other = {k: v.clone() for k, v in one.items()}
    other["input_ids"][2, 5] += 1
    assert batch_digest(one) != batch_digest(other)


@pytest.mark.parametrize(
    ("packed", "match"),
    [
        (SampledBatch(["x"], ["float64"], [[2]], zlib.compress(bytes(16))), "dtype"),
        (SampledBatch(["x"], ["int64"], [[4]], zlib.compress(bytes(16))), "do not match"),
        (SampledBatch(["x"], ["int64"], [[2]], b"not deflated"), "inflate"),
        (
            SampledBatch(["x", "x"], ["int64", "int64"], [[1], [1]], zlib.compress(bytes(16))),
            "twice",
        ),
        (SampledBatch([], [], [], b""), "1 to"),
        # a bomb: a few kilobytes that would inflate past the limit are refused before inflating
        (
            SampledBatch(["x"], ["uint8"], [[MAX_BATCH_BYTES + 1]], zlib.compress(bytes(2**20))),
            "at most",
        ),
        (SampledBatch(["x"], ["uint8"], [[4]], zlib.compress(bytes(2**20))), "do not match"),
        # stored dtypes: narrower signed integers of a signed integer tensor, nothing else
        (SampledBatch(["x"], ["int32"], [[2]], zlib.compress(bytes(8)), ["int64"]), "travel"),
        (SampledBatch(["x"], ["float32"], [[2]], zlib.compress(bytes(4)), ["int16"]), "travel"),
        (SampledBatch(["x"], ["int64"], [[2]], zlib.compress(bytes(8)), ["float32"]), "travel"),
        (SampledBatch(["x"], ["uint8"], [[2]], zlib.compress(bytes(2)), ["int8"]), "travel"),
        (
            SampledBatch(["x"], ["int64"], [[2]], zlib.compress(bytes(4)), ["int16", "int8"]),
            "as many",
        ),
        (
            SampledBatch(["x"], ["int64"], [[4]], zlib.compress(bytes(16)), ["int16"]),
            "do not match",
        ),
        # the bound is on the batch as it unpacks, not as it travels
        (
            SampledBatch(["x"], ["int64"], [[MAX_BATCH_BYTES // 8 + 1]], b"", ["int8"]),
            "at most",
        ),
    ],
)
def test_a_bad_batch_is_refused(packed: SampledBatch, match: str) -> None:
    with pytest.raises(WireFormatError, match=match):
        unpack_batch(packed)


def test_a_free_rider_forges_the_share_it_skips_and_a_turncoat_only_from_its_epoch() -> None:
    model = torch.nn.Linear(4, 1)
    epoch = [0]
    ledger = WorkLedger(list(model.parameters()), "float32", lambda: epoch[0])

    def microbatch(record: Recorder) -> bool:
        """One microbatch through ``record``; whether its gradient was left in place."""
        batch = {"inputs": torch.randn(8, 4)}
        model.zero_grad()
        loss = model(batch["inputs"]).square().mean()
        loss.backward()
        record(batch, loss.item())
        return model.weight.grad is not None

    tenth = FreeRider(0.1)
    record = tenth(ledger)
    assert sum(microbatch(record) for _ in range(20)) == 2  # it computes a tenth
    assert tenth.forged == 18
    turncoat = FreeRider(0.0, from_epoch=2)
    record = turncoat(ledger)
    assert all(microbatch(record) for _ in range(5))  # epochs 0 and 1: all of it
    epoch[0] = 1
    assert all(microbatch(record) for _ in range(5))
    assert turncoat.forged == 0
    epoch[0] = 2
    assert not any(microbatch(record) for _ in range(5))
    assert turncoat.forged == 5
    receipts = [entry.receipt for entry in ledger.cut()]
    assert [r.params_epoch for r in receipts[-5:]] == [2] * 5
    assert len({r.fingerprint for r in receipts[-6:]}) == 1  # copies of its last real one


def test_a_batch_is_fresh_until_it_is_computed_at_the_same_parameters() -> None:
    model = torch.nn.Linear(4, 1)
    epoch = [0]
    ledger = WorkLedger(list(model.parameters()), "float32", lambda: epoch[0])
    batch = {"inputs": torch.randn(8, 4)}
    other = {"inputs": torch.randn(8, 4)}
    assert ledger.fresh(batch)
    model(batch["inputs"]).square().mean().backward()
    ledger.record(batch, 1.0)
    assert not ledger.fresh(batch)
    assert not ledger.fresh({"inputs": batch["inputs"].clone()})  # the same values
    assert ledger.fresh(other)
    epoch[0] = 1
    assert ledger.fresh(batch)  # other parameters: another gradient
    epoch[0] = 0
    taken = ledger.cut()  # the epoch went to its round
    assert ledger.fresh(batch)
    ledger.restore(taken)  # the round was short: the epoch goes on
    assert not ledger.fresh(batch)


def test_a_receipt_names_the_parameters_its_gradient_was_computed_at() -> None:
    """The trainer reads its parameters where the checker reads its snapshot: the same values."""
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 2))
    params = list(model.parameters())
    trainer_side = Fingerprinter(params).read_parameters()
    snapshot = [p.detach().clone() for p in params]
    assert np.array_equal(trainer_side, parameters_at(snapshot))
    with torch.no_grad():
        params[0].mul_(1.01)
    moved = Fingerprinter(params).read_parameters()
    assert relative_distance(moved, parameters_at(snapshot)) > 1e-4


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [
        ([1.0, 0.0], [1.0, 0.0], 0.0),
        ([0.0, 0.0], [0.0, 0.0], 0.0),
        ([1.0, 0.0], [0.0, 0.0], float("inf")),
        ([3.0, 5.0], [0.0, 5.0], 3 / 5),
    ],
)
def test_relative_distance(a: list[float], b: list[float], distance: float) -> None:
    assert relative_distance(np.array(a), np.array(b)) == pytest.approx(distance)


async def test_a_leaving_trainer_answers_that_it_is_leaving() -> None:
    """Not "no such method" (a refusal, which fails the check) while its host still answers."""
    from core.net.errors import UnavailableError

    model = torch.nn.Linear(4, 1)
    ledger = WorkLedger(list(model.parameters()), "float32", lambda: 0)
    batch = {"inputs": torch.randn(8, 4)}
    model(batch["inputs"]).square().mean().backward()
    ledger.record(batch, 1.0)
    ledger.seal(0, ledger.cut())
    assert ledger._entries(0)
    ledger.leave()
    with pytest.raises(UnavailableError, match="leaving"):
        ledger._entries(0)
