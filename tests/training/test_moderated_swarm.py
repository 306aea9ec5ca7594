"""A moderated swarm end to end, in this process: a coordinator, a backbone logged in as the
organizer, three trainers for two users. The leaderboard must credit each user exactly the samples
of every epoch their peers stepped in, however the backbone's readings fell."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from pathlib import Path

import aiohttp
import pytest

from core.account import CoordinatorClient
from core.cli.access import moderated_access
from core.data import ShardServer
from core.project import load_manifest
from core.swarm.demo_data import DEMO_MANIFEST
from core.swarm.moderated import ORGANIZER, start_coordinator
from core.training.credit.metrics import EpochMetrics
from core.training.peer.project_peer import PeerSettings, ProjectPeer
from core.trust.identity import Identity
from core.worker.events import PeerEpoch, PeerEvent, PeerReady
from tests.support.leaks import wait_until

pytestmark = pytest.mark.slow

USERS = ("alice", "bob", "alice")
UNTIL_EPOCH = 6


def landed(processed: dict[int, list[tuple[int, int]]], users: tuple[str, ...]) -> dict[str, int]:
    """Samples per user of the epochs their peers stepped in (``PeerEpoch``: the update landed)."""
    expected: dict[str, int] = defaultdict(int)
    for index, user in enumerate(users):
        expected[user] += sum(n for _, n in processed[index])
    return dict(expected)


def credited(reported: list[EpochMetrics]) -> dict[str, int]:
    """Samples per user in the backbone's reports, late ones included."""
    total: dict[str, int] = defaultdict(int)
    for metrics in reported:
        for user, samples in metrics.by_user().items():
            total[user] += samples
    return dict(total)


async def test_the_leaderboard_matches_what_each_users_peers_processed(
    demo_data: Path, tmp_path: Path
) -> None:
    swarm = await start_coordinator(DEMO_MANIFEST, tmp_path)
    server = ShardServer(demo_data)
    base = await server.start()
    manifest = load_manifest(swarm.manifest_path).with_training(target_batch_size=64)
    reported: list[EpochMetrics] = []
    processed: dict[int, list[tuple[int, int]]] = defaultdict(list)  # peer -> (epoch, samples)
    try:
        async with contextlib.AsyncExitStack() as stack:
            identity = Identity.generate()
            aux_access = await stack.enter_async_context(
                moderated_access(
                    manifest, identity, ORGANIZER, swarm.passwords[ORGANIZER], report=True
                )
            )
            reporter = aux_access.reporter
            assert reporter is not None

            def on_metrics(metrics: EpochMetrics) -> None:
                reported.append(metrics)
                reporter.submit(metrics.contribution_report())

            ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

            def aux_event(event: PeerEvent) -> None:
                if isinstance(event, PeerReady) and not ready.done():
                    ready.set_result(event.address)

            aux = ProjectPeer(
                PeerSettings(
                    manifest, work_dir=tmp_path / "aux", role="backbone", data_base=base,
                    identity=identity, access=aux_access.gate, on_metrics=on_metrics,
                ),
                aux_event,
            )  # fmt: skip
            stack.push_async_callback(aux.close)
            aux_stop = asyncio.Event()
            aux_task = asyncio.create_task(aux.run(aux_stop), name="test/aux")
            address = await asyncio.wait_for(asyncio.shield(ready), 60)

            trainers = []
            for index, user in enumerate(USERS):
                peer_id = Identity.generate()
                access = await stack.enter_async_context(
                    moderated_access(manifest, peer_id, user, swarm.passwords[user], report=False)
                )

                def on_event(event: PeerEvent, index: int = index) -> None:
                    if isinstance(event, PeerEpoch):
                        processed[index].append((event.epoch, event.samples))

                peer = ProjectPeer(
                    PeerSettings(
                        manifest, work_dir=tmp_path / f"peer-{index}", data_base=base,
                        initial_peers=(address,), data_seed=index + 1, identity=peer_id,
                        access=access.gate, until_epoch=UNTIL_EPOCH,
                    ),
                    on_event,
                )  # fmt: skip
                stack.push_async_callback(peer.close)
                trainers.append(asyncio.create_task(peer.run(asyncio.Event())))
            await asyncio.wait_for(asyncio.gather(*trainers), 240)
            # the backbone reports an epoch a moment after it completes; the trainers' last
            # records (they left) list every epoch they landed
            last_epoch = UNTIL_EPOCH - 1
            with contextlib.suppress(TimeoutError):  # the assertions below show what differs
                await wait_until(lambda: credited(reported) == landed(processed, USERS), 30)
            assert max(m.epoch for m in reported if not m.late) == last_epoch
            aux_stop.set()
            await asyncio.wait_for(aux_task, 20)
        # leaving the block closed the reporter, which sent what was queued
        async with CoordinatorClient(swarm.service.url) as client:
            board = await client.leaderboard(limit=10)
        # the reports carried the figures the project page shows (``/stats``)
        async with (
            aiohttp.ClientSession() as http,
            http.get(swarm.service.url + "/stats") as response,
        ):
            stats = await response.json()
    finally:
        await server.close()
        await swarm.service.close()

    # every epoch every peer landed, each once: whatever the timing of the backbone's readings
    got = {entry["username"]: entry["samples"] for entry in board["users"]}
    assert got == landed(processed, USERS)
    assert sum(got.values()) == sum(m.samples for m in reported) == board["totals"]["samples"]
    devices = {entry["username"]: entry["devices"] for entry in board["users"]}
    assert devices == {"alice": 2, "bob": 1}
    last = max((m for m in reported if not m.late), key=lambda m: m.epoch)
    assert stats["epoch"] == last.epoch
    assert stats["curve"]["points"] == sum(1 for m in reported if m.loss is not None)
    assert stats["loss"] == last.loss
