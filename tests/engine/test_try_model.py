"""Trying the model through the engine: the active project's model answers a volunteer's question
over the control API from its trainer's replica (the demo's real model, standing in for a peer's),
while paused too; when it cannot answer it says why (no project, a dmoe project, the model not here
yet, unloaded); questions it cannot take are refused; and none of this loads torch before a peer
has."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from core.api import AttachRequest, BadRequest, ModelAnswer
from core.api.testing.model import NO_MASK
from core.engine.errors import InvalidArgument
from core.engine.projects import ProjectSlot
from core.engine.trying import ModelTrial
from core.project import load_any_manifest
from core.util.blocking import BlockingPool
from tests.engine.standin import StandInPeer
from tests.engine.test_dmoe_hosting import MANIFEST as DMOE_MANIFEST
from tests.support.engine import CtlRun, Running, until
from tests.support.leaks import wait_until

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "resources" / "demo" / "project.toml"
QUESTION = "The ___ of the river was quiet."


@dataclass
class Replicas:
    """Stand-in peers' replicas: the demo's real model, once ``caught_up``."""

    caught_up: bool = False
    made: dict[int, Any] = field(default_factory=dict)
    bridges: list[Any] = field(default_factory=list)


@pytest.fixture
def replicas(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    """``replica_of`` gives any peer (the engine's stand-ins) the demo's model, one per peer, with
    a training thread of its own and a tokenizer trained on a few texts, once ``caught_up``; a
    ``ProjectPeer`` would give its trainer's."""
    import gzip
    import json

    from core.data import train_tokenizer, write_demo_corpus
    from core.project import load_manifest
    from core.training.peer import tryout
    from core.training.peer.recipe import build_model
    from core.worker.bridge import TrainingBridge

    root = tmp_path_factory.mktemp("texts")
    (shard,) = write_demo_corpus(root, shards=1, megabytes=0.05, seed=5)
    with gzip.open(shard, "rt") as lines:
        texts = [json.loads(line)["text"] for line in lines]
    tokenizer = train_tokenizer(texts, vocab_size=300, path=root / "tokenizer.json")
    manifest = load_manifest(DEMO)
    state = Replicas()

    def replica_of(peer: object) -> tryout.Replica | None:
        if peer is None or not state.caught_up:
            return None
        if id(peer) not in state.made:
            bridge = TrainingBridge("training")
            state.bridges.append(bridge)
            state.made[id(peer)] = tryout.Replica(
                manifest, bridge, build_model(manifest), lambda: 7, lambda: tokenizer
            )
        made: tryout.Replica = state.made[id(peer)]
        return made

    monkeypatch.setattr(tryout, "replica_of", replica_of)
    yield state
    for bridge in state.bridges:
        bridge.close()


async def test_the_active_projects_model_answers_over_the_api(
    engine: Running, peers: list[StandInPeer], replicas: Replicas, ctl_run: CtlRun
) -> None:
    client = engine.client
    answer = await client.try_model(QUESTION)
    assert (answer.code, answer.project, answer.answered) == ("no_project", None, False)
    assert answer.reason.startswith("No project is attached")
    assert (await ctl_run("try", QUESTION)).startswith("no answer: No project is attached")

    await client.attach(AttachRequest(str(DEMO)))
    answer = await client.try_model(QUESTION)
    assert (answer.code, answer.project) == ("not_ready", "barnraise-demo")
    assert answer.reason == (
        "The model is not here yet: it is loaded when this computer starts contributing to "
        "barnraise-demo."
    )

    await client.set_settings({"max_other_cpu_percent": 100, "cpu_when_in_use": "pause"})
    await client.start()
    await until(client, lambda s: s.state == "running")
    answer = await client.try_model(QUESTION)
    assert answer.code == "not_ready"  # the peer runs, but has not caught up yet
    assert "still loading the collaboration's model" in answer.reason

    replicas.caught_up = True
    before = time.time()
    answer = await client.try_model(QUESTION)
    assert answer.answered, answer.reason
    assert (answer.kind, answer.project, answer.epoch) == ("masked", "barnraise-demo", 7)
    assert len(answer.guesses) == 5
    assert answer.text == f"The {answer.guesses[0].word} of the river was quiet."
    assert answer.copied_at is not None
    assert before - 1 <= answer.copied_at <= time.time() + 1
    said = (await ctl_run("try", QUESTION)).splitlines()
    assert said[0].endswith("(the model of epoch 7)")
    assert said[1] == "guesses for the first missing word:"
    assert len(said) == 7  # the sentence, the heading and five guesses with their shares

    await client.pause()  # a paused peer keeps its model: asking it disturbs nothing
    assert (await client.try_model("the [mask] of the river")).answered

    with pytest.raises(BadRequest) as refused:
        await client.try_model("no word is missing here")
    assert refused.value.message == NO_MASK  # the fake engine's words are the engine's
    with pytest.raises(BadRequest, match="at most 500"):
        await client.try_model("[MASK] " + "river " * 100)
    with pytest.raises(BadRequest, match="type a sentence"):
        # past the client's own check: the engine refuses it too
        await client._call("POST", "/v1/model/try", ModelAnswer, body={"text": "  "})


async def test_a_dmoe_project_has_no_single_model(engine: Running, tmp_path: Path) -> None:
    manifest = tmp_path / "project.toml"
    manifest.write_text(DMOE_MANIFEST, encoding="utf-8")
    await engine.client.attach(AttachRequest(str(manifest), device="cpu"))
    answer = await engine.client.try_model(QUESTION)
    assert (answer.code, answer.project) == ("dmoe_project", "engine-dmoe")
    assert "mixture-of-experts project" in answer.reason


# ---- the reasons, one by one -------------------------------------------------------------------


@dataclass
class Runner:
    """What ``ModelTrial`` reads of a ``ProjectRunner``."""

    slot: ProjectSlot
    manifest: Any = None
    peer: Any = None
    state: str = "stopped"
    error: str | None = None

    def status(self) -> Any:
        from core.policy import PeerStatus

        return PeerStatus(self.state, self.error, waiting_for="no peer has the state yet")


@pytest.fixture
def pool() -> Iterator[BlockingPool]:
    blocking = BlockingPool("test")
    yield blocking
    blocking.close()


async def test_each_reason_it_cannot_answer(pool: BlockingPool, replicas: Replicas) -> None:
    slot = ProjectSlot("barnraise-demo", "", DEMO)
    runner = Runner(slot)
    trial = ModelTrial(lambda: runner, pool)
    try:
        assert (await trial.ask(QUESTION)).reason == (
            "The model is not here yet: it is loaded when this computer starts contributing to "
            "barnraise-demo."
        )
        runner.state = "starting"
        assert (await trial.ask(QUESTION)).reason == (
            "The model is not here yet: the peer of barnraise-demo is starting (joining the "
            "collaboration, building the model)."
        )
        runner.state, runner.error = "failed", "PyTorch is not here yet"
        assert (await trial.ask(QUESTION)).reason == (
            "The model is not here yet: the peer of barnraise-demo cannot run: PyTorch is not "
            "here yet."
        )
        runner.manifest = load_any_manifest(DEMO)
        runner.state, runner.error, runner.peer = "ready", None, object()
        waiting = await trial.ask(QUESTION)
        assert waiting.code == "not_ready"
        assert waiting.reason == (
            "The model is not here yet: this computer is still loading the collaboration's "
            "model (no peer has the state yet)."
        )
        replicas.caught_up = True
        assert (await trial.ask(QUESTION)).answered

        runner.state, runner.peer = "stopped", None  # the engine stopped the peer
        unloaded = await trial.ask(QUESTION)
        assert (unloaded.code, unloaded.project) == ("unloaded", "barnraise-demo")
        assert unloaded.reason == (
            "The engine unloaded barnraise-demo's model (its peer stopped); it is loaded again "
            "when this computer contributes to it again."
        )
        assert trial._tryout is None  # its copy is dropped with it
        runner.state = "starting"  # and is being loaded again
        assert "is starting" in (await trial.ask(QUESTION)).reason
    finally:
        await trial.close()


async def test_a_new_peer_gets_a_new_copy_and_an_unused_one_is_dropped(
    pool: BlockingPool, replicas: Replicas
) -> None:
    replicas.caught_up = True
    runner = Runner(ProjectSlot("barnraise-demo", "", DEMO), load_any_manifest(DEMO))
    runner.state, runner.peer = "ready", object()
    trial = ModelTrial(lambda: runner, pool, keep=0.3)
    try:
        assert (await trial.ask(QUESTION)).answered
        first = trial._tryout
        assert first is not None
        assert (await trial.ask(QUESTION)).answered
        assert trial._tryout is first
        assert first.copies == 1  # the copy answers again
        runner.peer = object()  # rebuilt: a new peer, a new model
        assert (await trial.ask(QUESTION)).answered
        assert trial._tryout is not first
        await wait_until(lambda: trial._tryout is None, timeout=10)  # unused for ``keep``
        assert (await trial.ask(QUESTION)).answered  # a new copy for a question after that
    finally:
        await trial.close()


async def test_questions_it_cannot_take_are_invalid(pool: BlockingPool) -> None:
    trial = ModelTrial(lambda: None, pool)
    try:
        with pytest.raises(InvalidArgument, match="type a sentence"):
            await trial.ask(" \n ")
        with pytest.raises(InvalidArgument, match="501 characters long; the model takes at most"):
            await trial.ask("x" * 501)
        assert (await trial.ask(QUESTION)).code == "no_project"
    finally:
        await trial.close()


def test_asking_before_a_peer_has_a_model_never_loads_torch(tmp_path: Path) -> None:
    # in a fresh interpreter: in this one, other tests may have loaded torch already
    code = (
        "import asyncio, sys, pathlib\n"
        "from core.engine.projects import ProjectRunner, ProjectSlot\n"
        "from core.engine.trying import ModelTrial\n"
        "from core.trust.identity import Identity\n"
        "from core.util.blocking import BlockingPool\n"
        "async def main():\n"
        "    pool = BlockingPool('test')\n"
        "    slot = ProjectSlot('barnraise-demo', '', pathlib.Path(sys.argv[1]))\n"
        "    runner = ProjectRunner(slot, work_dir=pathlib.Path(sys.argv[2]),\n"
        "                           identity=Identity.generate(), on_event=print)\n"
        "    for active in (None, runner):\n"
        "        trial = ModelTrial(lambda: active, pool)\n"
        "        print((await trial.ask('the ___ sat')).code)\n"
        "        await trial.close()\n"
        "    pool.close()\n"
        "asyncio.run(main())\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(DEMO), str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["no_project", "not_ready", "False"]
