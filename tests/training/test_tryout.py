"""Trying the model, on the torch side: a real tiny model (the demo's, and the Llama demo's) answers
as its own logits say; the copy is taken on the thread that owns the model, leaves it untouched,
answers while training is paused, and is reused for ``COPY_EVERY`` seconds; a diloco trainer's
answers come from its outer parameters (the epoch's), not from the model its inner steps move;
questions that cannot be asked are refused in words; a stopped peer's model is gone."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from core.averaging import Averager
from core.codecs import NONE
from core.data import TextTokenizer, train_tokenizer, write_demo_corpus
from core.project import Manifest, load_manifest
from core.swarm.demo_data import DEMO_MANIFEST
from core.training.diloco.optimizer import DilocoConfig, DilocoOptimizer
from core.training.diloco.state import DilocoState
from core.training.links import PeerLinks
from core.training.peer.project_peer import PeerSettings, ProjectPeer
from core.training.peer.recipe import build_model
from core.training.peer.tryout import (
    COMPLETION_TOKENS,
    COPY_EVERY,
    TOP_GUESSES,
    ModelTryout,
    QuestionRefused,
    Replica,
    ReplicaGone,
    copy_to_cpu,
    replica_of,
)
from core.training.state import TrainingState
from core.util.process.resources import resource_path
from core.worker.bridge import TrainingBridge
from core.worker.errors import Interrupted
from tests.conftest import MakeHost
from tests.training.conftest import AVERAGING, start_node

MASKED = "the [MASK] of the river was quiet in the morning."
LLAMA_DEMO = resource_path("llama-demo/project.toml")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    root = tmp_path_factory.mktemp("tryout")
    (shard,) = write_demo_corpus(root / "texts", shards=1, megabytes=0.05, seed=3)
    with gzip.open(shard, "rt") as lines:
        texts = [json.loads(line)["text"] for line in lines]
    return train_tokenizer(texts, vocab_size=300, path=root / "tokenizer.json")


@pytest.fixture(scope="module")
def demo() -> Manifest:
    return load_manifest(DEMO_MANIFEST)


@pytest.fixture
def training() -> Iterator[TrainingBridge]:
    """The training thread, which owns the model."""
    bridge = TrainingBridge("training")
    yield bridge
    bridge.close()


def replica(
    manifest: Manifest, model: torch.nn.Module, bridge: TrainingBridge, tokenizer: TextTokenizer
) -> Replica:
    return Replica(manifest, bridge, model, epoch=lambda: 7, tokenizer=lambda: tokenizer)


def word_logits(
    model: torch.nn.Module, ids: list[int], tokenizer: TextTokenizer, keep: int | None = None
) -> torch.Tensor:
    """The model's own logits for ``ids``, the special tokens (but ``keep``) and the ids without a
    word ruled out."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    logits[:, tokenizer.vocab_size :] = -math.inf
    logits[:, sorted(tokenizer.special_ids - {keep})] = -math.inf
    return logits


async def test_the_top_guess_is_the_argmax_of_the_models_logits_at_the_mask(
    demo: Manifest, tokenizer: TextTokenizer, training: TrainingBridge
) -> None:
    model = build_model(demo)
    tryout = ModelTryout(replica(demo, model, training, tokenizer))
    try:
        reply = await tryout.answer(MASKED)
    finally:
        await tryout.aclose()
    first, rest = MASKED.split("[MASK]")
    ids = [
        tokenizer.cls_id,
        *tokenizer.encode(first),
        tokenizer.mask_id,
        *tokenizer.encode(rest),
        tokenizer.sep_id,
    ]
    at = ids.index(tokenizer.mask_id)
    logits = word_logits(model, ids, tokenizer)[at]
    best = int(logits.argmax())
    assert reply.kind == "masked"
    assert reply.guesses[0][0] == tokenizer.decode([best]).removeprefix("##")
    assert reply.fills == [reply.guesses[0][0]]
    assert len(reply.guesses) == TOP_GUESSES
    shares = [p for _, p in reply.guesses]
    assert shares == sorted(shares, reverse=True)
    assert shares[0] == pytest.approx(float(torch.softmax(logits, -1)[best]), rel=1e-4)
    assert 0 < sum(shares) <= 1
    assert reply.epoch == 7
    assert reply.completion == ""


async def test_every_mask_gets_its_own_best_guess(
    demo: Manifest, tokenizer: TextTokenizer, training: TrainingBridge
) -> None:
    tryout = ModelTryout(replica(demo, build_model(demo), training, tokenizer))
    try:
        reply = await tryout.answer("[MASK] river and the [MASK] were [MASK].")
    finally:
        await tryout.aclose()
    assert len(reply.fills) == 3
    assert reply.fills[0] == reply.guesses[0][0]


async def test_a_causal_model_completes_the_text_greedily(
    tokenizer: TextTokenizer, training: TrainingBridge
) -> None:
    llama = load_manifest(LLAMA_DEMO)
    model = build_model(llama)
    tryout = ModelTryout(replica(llama, model, training, tokenizer))
    try:
        reply = await tryout.answer("the river was")
    finally:
        await tryout.aclose()
    assert reply.kind == "causal"
    assert reply.guesses == []
    prompt = [tokenizer.cls_id, *tokenizer.encode("the river was")]
    first = int(word_logits(model, prompt, tokenizer, keep=tokenizer.sep_id)[-1].argmax())
    if first == tokenizer.sep_id:  # [SEP] first: the text ends there
        assert reply.completion == ""
    else:
        assert reply.completion.strip().startswith(tokenizer.decode([first]).removeprefix("##"))


class Scripted(torch.nn.Module):
    """A causal "model" that says the tokens of ``script`` one after another, then [SEP]."""

    def __init__(self, script: list[int], sep: int, vocabulary: int) -> None:
        super().__init__()
        self.script, self.sep, self.vocabulary = script, sep, vocabulary
        self.start = 0
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> SimpleNamespace:
        said = input_ids.size(1) - self.start
        logits = torch.zeros(1, input_ids.size(1), self.vocabulary)
        token = self.script[said] if said < len(self.script) else self.sep
        logits[0, -1, token] = 10.0
        return SimpleNamespace(logits=logits)


async def test_a_completion_stops_at_sep_and_joins_word_pieces(
    tokenizer: TextTokenizer, training: TrainingBridge
) -> None:
    llama = load_manifest(LLAMA_DEMO)
    prompt = "the river"
    script = tokenizer.encode(" was quiet and deep")
    model = Scripted(script, tokenizer.sep_id, 4096)
    model.start = 1 + len(tokenizer.encode(prompt))
    tryout = ModelTryout(replica(llama, model, training, tokenizer))
    try:
        reply = await tryout.answer(prompt)
    finally:
        await tryout.aclose()
    assert reply.completion == " was quiet and deep"

    # a word piece that continues the question's last word joins it, without a space
    piece, token = next(
        (p, i) for p, i in sorted(tokenizer._tokenizer.get_vocab().items()) if p.startswith("##")
    )
    joining = Scripted([token], tokenizer.sep_id, 4096)
    joining.start = model.start
    tryout = ModelTryout(replica(llama, joining, training, tokenizer))
    try:
        reply = await tryout.answer(prompt)
    finally:
        await tryout.aclose()
    assert reply.completion == piece.removeprefix("##")

    endless = Scripted(tokenizer.encode(" the river" * 40), tokenizer.sep_id, 4096)
    endless.start = model.start
    tryout = ModelTryout(replica(llama, endless, training, tokenizer))
    try:
        reply = await tryout.answer(prompt)
    finally:
        await tryout.aclose()
    assert len(tokenizer.encode(reply.completion)) == COMPLETION_TOKENS


async def test_questions_it_cannot_take_are_refused_in_words(
    demo: Manifest, tokenizer: TextTokenizer, training: TrainingBridge
) -> None:
    tryout = ModelTryout(replica(demo, build_model(demo), training, tokenizer))
    try:
        with pytest.raises(QuestionRefused, match=r"put \[MASK\] \(or ___\)"):
            await tryout.answer("the river was quiet")
        with pytest.raises(QuestionRefused, match="tokens long; this model reads at most 62"):
            await tryout.answer("[MASK] " + "river " * 80)
        assert tryout.copies == 0  # refused before anything was copied
    finally:
        await tryout.aclose()
    llama = load_manifest(LLAMA_DEMO)
    tryout = ModelTryout(replica(llama, build_model(llama), training, tokenizer))
    try:
        with pytest.raises(QuestionRefused, match="continues a text"):
            await tryout.answer("the [MASK] was quiet")
    finally:
        await tryout.aclose()


async def test_one_copy_answers_for_copy_every_seconds(
    demo: Manifest, tokenizer: TextTokenizer, training: TrainingBridge
) -> None:
    now = [100.0]
    model = build_model(demo)
    tryout = ModelTryout(replica(demo, model, training, tokenizer), monotonic=lambda: now[0])
    try:
        first = await tryout.answer(MASKED)
        now[0] += COPY_EVERY - 1
        with torch.no_grad():  # training moved on meanwhile: the copy does not see it
            model.token_embedding.weight.mul_(-1.0)
        assert await tryout.answer(MASKED) == first
        assert tryout.copies == 1
        now[0] += 1
        changed = await tryout.answer(MASKED)
        assert tryout.copies == 2
        assert changed.guesses != first.guesses
    finally:
        await tryout.aclose()


async def test_the_copy_is_taken_on_the_training_thread_and_leaves_the_model_alone(
    demo: Manifest, tokenizer: TextTokenizer, training: TrainingBridge
) -> None:
    model = build_model(demo)
    model.train()
    hooks = training.watch(model)  # as the trainer installs them
    training.interrupt()  # a paused peer: the training thread's computations are interrupted
    threads: list[str] = []

    def on_thread() -> torch.nn.Module:
        threads.append(threading.current_thread().name)
        return copy_to_cpu(model)

    twin = await training.run(on_thread)
    assert threads[0].startswith("training")
    with pytest.raises(Interrupted):  # the model itself stays watched
        model(torch.tensor([[1, 2, 3]]))
    assert model.training
    assert all(p.requires_grad for p in model.parameters())
    assert not twin.training
    for (name, mine), theirs in zip(
        twin.state_dict().items(), model.state_dict().values(), strict=True
    ):
        assert torch.equal(mine, theirs), name
        assert mine.data_ptr() != theirs.data_ptr(), name
    assert twin.decoder.weight is twin.token_embedding.weight  # tied weights stay tied
    assert not any(p.requires_grad for p in twin.parameters())
    twin(torch.tensor([[1, 2, 3]]))  # answers although training is interrupted

    # and through the tryout, whose forward passes run on its own thread
    tryout = ModelTryout(replica(demo, model, training, tokenizer))
    try:
        reply = await tryout.answer(MASKED)
    finally:
        await tryout.aclose()
    assert len(reply.guesses) == TOP_GUESSES
    for hook in hooks:
        hook.remove()


async def test_given_weights_replace_the_models_own_in_the_copy(
    demo: Manifest, training: TrainingBridge
) -> None:
    model = build_model(demo)
    before = {name: t.clone() for name, t in model.state_dict().items()}
    shapes = dict(model.named_parameters())
    # flat float32 arrays, as a mode keeps its outer parameters; the tied embedding once, by the
    # name ``named_parameters`` gives it
    weights = {
        "token_embedding.weight": np.full(shapes["token_embedding.weight"].numel(), 0.5, "float32"),
        "decoder.bias": np.arange(shapes["decoder.bias"].numel(), dtype=np.float32),
    }

    twin = await training.run(copy_to_cpu, model, weights)
    assert torch.equal(
        twin.token_embedding.weight, torch.full_like(model.token_embedding.weight, 0.5)
    )
    assert twin.decoder.weight is twin.token_embedding.weight  # tied weights stay tied
    assert torch.equal(twin.decoder.bias, torch.from_numpy(weights["decoder.bias"]))
    for name, t in twin.state_dict().items():
        if name not in {*weights, "decoder.weight"}:
            assert torch.equal(t, before[name]), name  # the rest is the model's own
    for name, t in model.state_dict().items():
        assert torch.equal(t, before[name]), name  # the model is left alone
    weights["decoder.bias"][:] = -1.0  # the copy keeps none of the arrays it was given
    assert not torch.equal(twin.decoder.bias, torch.from_numpy(weights["decoder.bias"]))

    with pytest.raises(ValueError, match=r"no parameters named nowhere\.weight"):
        await training.run(copy_to_cpu, model, {"nowhere.weight": np.zeros(1, "float32")})


async def test_a_diloco_trainer_answers_from_its_outer_parameters(
    demo: Manifest, tokenizer: TextTokenizer, make_host: MakeHost, tmp_path: Path
) -> None:
    peer = ProjectPeer(PeerSettings(demo, tmp_path), lambda event: None)
    training = peer.bridge
    host, dht = await start_node(make_host, None)
    averager = Averager(host, dht, "tryout", AVERAGING)
    model = build_model(demo)
    state = TrainingState(model, torch.optim.AdamW(model.parameters(), lr=0.05))
    diloco = DilocoState(state, outer_lr=0.7, outer_momentum=0.9, overlap=False, sparse=False,
                         clip_norm=None)  # fmt: skip
    optimizer = DilocoOptimizer(
        diloco, PeerLinks.create(averager, training), DilocoConfig(round_seconds=10**9), codec=NONE
    )
    # what a trainer that caught up holds: its model, and the mode's optimizer
    role = SimpleNamespace(trainer=SimpleNamespace(model=model), optimizer=optimizer)
    peer._role = role  # type: ignore[assignment]
    try:
        generator = torch.Generator().manual_seed(5)
        for _ in range(3):  # inner steps: theta moves, the anchor stays where the epoch put it

            def backward() -> None:
                ids = torch.randint(5, tokenizer.vocab_size, (4, 16), generator=generator)
                logits = model(ids, torch.ones_like(ids)).logits
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())
                loss.backward()  # type: ignore[no-untyped-call]

            await training.run(backward)
            await optimizer.step(4, 1.0)
        anchor = [
            torch.from_numpy(a).reshape(p.shape)
            for a, p in zip(diloco.anchor, state.parameters, strict=True)
        ]
        theta = [p.detach().clone() for p in state.parameters]
        assert not all(torch.equal(a, t) for a, t in zip(anchor, theta, strict=True))

        replica = replica_of(peer)
        assert replica is not None
        # this test's tokenizer: the demo's is written where a swarm serves its data
        tryout = ModelTryout(dataclasses.replace(replica, tokenizer=lambda: tokenizer))
        try:
            reply = await tryout.answer(MASKED)
            answering = tryout._copy
        finally:
            await tryout.aclose()
        assert reply.epoch == optimizer.epoch == 0
        assert answering is not None
        trainable = list(answering.parameters())
        assert len(trainable) == len(anchor)
        for mine, outer in zip(trainable, anchor, strict=True):
            assert mine.dtype == torch.float32
            assert torch.equal(mine, outer)
        assert not answering.training
        for p, t in zip(state.parameters, theta, strict=True):  # training's own weights untouched
            assert torch.equal(p, t)
            assert p.requires_grad
    finally:
        optimizer.interrupt()
        await optimizer.close()
        await averager.close()
        await training.aclose()
        await dht.close()


async def test_a_stopped_peers_model_is_gone(
    demo: Manifest, tokenizer: TextTokenizer, training: TrainingBridge
) -> None:
    tryout = ModelTryout(replica(demo, build_model(demo), training, tokenizer))
    await training.aclose()  # the peer closed its training thread
    try:
        with pytest.raises(ReplicaGone):
            await tryout.answer(MASKED)
    finally:
        await tryout.aclose()


def test_only_a_trainer_that_caught_up_has_a_replica() -> None:
    assert replica_of(object()) is None
    assert replica_of(None) is None


@pytest.mark.cuda
async def test_a_model_on_the_gpu_is_copied_to_the_cpu_and_stays_there(demo: Manifest) -> None:
    model = build_model(demo).to("cuda")
    before = torch.cuda.memory_allocated()
    twin = copy_to_cpu(model)
    assert {p.device.type for p in twin.parameters()} == {"cpu"}
    assert {p.device.type for p in model.parameters()} == {"cuda"}
    assert torch.cuda.memory_allocated() == before  # no second copy on the GPU
    for mine, theirs in zip(twin.parameters(), model.parameters(), strict=True):
        assert torch.equal(mine, theirs.cpu())
