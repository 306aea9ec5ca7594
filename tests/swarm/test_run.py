"""LocalSwarmRun's edges without training: options are checked, a run told to stop while its data is
written starts no peer and leaves nothing behind, and a moderated run's standings say whether the
leaderboard credits every sample the backbone counted. (Whole runs: tests/cli.)"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from core.config.paths import UserDirs
from core.data import load_tokenizer
from core.project import load_manifest
from core.swarm import running_swarms
from core.swarm.demo_data import DEMO_MANIFEST, prepare_demo_data
from core.swarm.moderated import Standings, standings, start_coordinator
from core.swarm.run import Joining, LocalSwarmRun, SwarmOptions
from core.worker.events import PeerEvaluation, PeerMetrics
from tests.support.leaks import assert_no_leaks, open_fd_count


class Heard:
    """A SwarmOutput that keeps what it was told."""

    def __init__(self) -> None:
        self.said: list[tuple[str, Any]] = []

    def preparing(self, data_root: Path) -> None:
        self.said.append(("preparing", data_root))

    def coordinator(self, url: str, manifest: Path) -> None:
        self.said.append(("coordinator", url))

    def running(self, joining: Joining) -> None:
        self.said.append(("running", joining))

    def metrics(self, event: PeerMetrics) -> None:
        self.said.append(("metrics", event))

    def evaluation(self, event: PeerEvaluation) -> None:
        self.said.append(("evaluation", event))

    def problem(self, message: str) -> None:
        self.said.append(("problem", message))

    def standings(self, standings: Standings) -> None:
        self.said.append(("standings", standings))


def test_options_that_make_no_swarm_are_refused() -> None:
    with pytest.raises(ValueError, match="0 or more trainer peers"):
        SwarmOptions(peers=-1)
    with pytest.raises(ValueError, match="keep_accounts goes with moderated"):
        SwarmOptions(keep_accounts=True)
    assert SwarmOptions(peers=0, moderated=True, keep_accounts=True).peers == 0


@pytest.mark.slow
async def test_a_run_told_to_stop_while_its_data_is_written_starts_no_peer(tmp_path: Path) -> None:
    work = tmp_path / "swarm"
    # written first, so that what loading torch and the tokenizer opens is in the baseline
    await asyncio.to_thread(prepare_demo_data, load_manifest(DEMO_MANIFEST), work / "data")
    dirs = UserDirs.under(tmp_path / "home")
    heard = Heard()
    stop = asyncio.Event()
    stop.set()  # Ctrl-C before the peers start
    baseline = open_fd_count()
    run = LocalSwarmRun(SwarmOptions(peers=2, work_dir=work, moderated=True), heard, dirs=dirs)
    assert await run.run(stop) == 0
    assert heard.said == [("preparing", work / "data")]  # no coordinator, no peer, no problem
    assert not (work / "logs" / "aux.log").exists()
    assert not (work / "coordinator").exists()
    assert running_swarms(dirs) == []
    await assert_no_leaks(baseline)  # the shard server is closed


async def test_standings_say_whether_the_leaderboard_credits_every_counted_sample(
    tmp_path: Path,
) -> None:
    swarm = await start_coordinator(DEMO_MANIFEST, tmp_path)
    try:
        nothing_yet = await standings(swarm)
        assert (nothing_yet.users, nothing_yet.samples, nothing_yet.epochs) == ([], 0, 0)
        assert nothing_yet.match
        # an epoch whose 256 samples the backbone counted but credited to nobody
        swarm.service.store.contributions.record(0, time.time(), 256, [])
        uncredited = await standings(swarm)
        assert (uncredited.epochs, uncredited.counted, uncredited.samples) == (1, 256, 0)
        assert not uncredited.match
    finally:
        await swarm.service.close()


def test_the_demo_tokenizer_is_trained_again_for_a_rewritten_corpus(
    tmp_path: Path, demo_data: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(demo_data, data)
    tokenizer = data / "tokenizer.json"
    corpus = data / "shards" / "corpus.json"
    manifest = load_manifest(DEMO_MANIFEST)
    prepare_demo_data(manifest, data)  # everything in place: nothing written again
    kept = tokenizer.stat().st_mtime_ns
    assert kept >= corpus.stat().st_mtime_ns
    # a tokenizer older than the corpus was trained on other text (an older demo's)
    os.utime(tokenizer, ns=(kept, corpus.stat().st_mtime_ns - 10**9))
    prepare_demo_data(manifest, data)
    assert tokenizer.stat().st_mtime_ns >= corpus.stat().st_mtime_ns  # trained again
    assert load_tokenizer(tokenizer).vocab_size == manifest.data.tokenizer_vocab_size
