"""A diloco project's rounds in the engine's state: its mode, the round's length, how far into it
Unix time is, and what the peer's last exchange sent; its epochs credited in the ledger as
dedloc's are, with the bytes from the host's traffic counters alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from core.api import AttachRequest, Rounds
from core.engine.views import rounds_view
from core.project import load_manifest
from core.worker.events import PeerEpoch
from tests.engine.standin import StandInPeer
from tests.support.engine import Running, until
from tests.support.leaks import poll_until

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"
ROUND_END = 60.0 * 28_333_334
"""A Unix time on which a minute's round ends."""


def diloco_demo(folder: Path) -> Path:
    text = DEMO.read_text()
    assert text.count("[training]\n") == 1
    path = folder / "project.toml"
    path.write_text(
        text.replace("[training]\n", '[training]\nmode = "diloco"\nround_seconds = 30\n')
    )
    return path


def epoch(bytes_sent: int) -> PeerEpoch:
    return PeerEpoch(7, 256, 3, True, "averaged 3 of 3 parts", 1.5, 768.0, bytes_sent, "ab12")


def test_the_round_is_where_unix_time_is_in_it() -> None:
    demo = load_manifest(DEMO)
    assert rounds_view(demo.training, epoch(10), now=ROUND_END + 34.0) == Rounds("dedloc")
    training = demo.with_training(mode="diloco", round_seconds=60.0).training
    assert rounds_view(training, None, now=ROUND_END + 34.0) == Rounds("diloco", 60.0, 34.0, None)
    started = rounds_view(training, epoch(1_234_567), now=ROUND_END)
    assert started == Rounds("diloco", 60.0, 0.0, 1_234_567, 0)  # a boundary starts a round
    late = dataclasses.replace(epoch(5), late=3)
    assert rounds_view(training, late, now=ROUND_END).work_late == 3


async def test_the_state_says_the_round_and_the_ledger_credits_the_epoch(
    engine: Running, peers: list[StandInPeer], tmp_path: Path
) -> None:
    client = engine.client
    await client.attach(AttachRequest(str(diloco_demo(tmp_path))))
    assert (await client.state()).rounds is None  # the peer has not read the manifest yet
    await client.set_settings({"max_other_cpu_percent": 100, "cpu_when_in_use": "pause"})
    await client.start()
    state = await until(client, lambda s: s.state == "running")
    rounds = state.rounds
    assert rounds is not None
    assert (rounds.mode, rounds.round_seconds, rounds.last_exchange_bytes) == ("diloco", 30.0, None)
    assert rounds.round_elapsed is not None
    assert 0.0 <= rounds.round_elapsed < 30.0

    (peer,) = peers
    # the host counted every byte of the exchange (and the DHT's), the epoch its chunks alone
    peer.totals = {"samples": 256, "compute_seconds": 3.0, "bytes_sent": 2_000_000}
    peer.on_event(epoch(1_234_567))
    rounds = (await client.state()).rounds
    assert rounds is not None
    assert rounds.last_exchange_bytes == 1_234_567
    stats = await poll_until(
        lambda: client.statistics(None, 1), lambda s: bool(s.totals.rounds and s.totals.samples)
    )
    totals = stats.totals
    assert (totals.samples, totals.epochs, totals.rounds) == (256, 1, 1)
    assert totals.bytes_sent == 2_000_000  # not counted twice
