"""Trying the model, on the torch side: a real tiny model (the demo's, and the Llama demo's) answers
as its own logits say; the copy is taken on the thread that owns the model, leaves it untouched,
answers while training is paused, and is reused for ``COPY_EVERY`` seconds; questions that cannot
be asked are refused in words; a stopped peer's model is gone."""

from __future__ import annotations

import gzip
import json
import math
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch

from core.data import TextTokenizer, train_tokenizer, write_demo_corpus
from core.project import Manifest, load_manifest
from core.swarm.demo_data import DEMO_MANIFEST
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
from core.util.process.resources import resource_path
from core.worker.bridge import TrainingBridge
from core.worker.errors import Interrupted

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
