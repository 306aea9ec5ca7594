"""Trying the model: a volunteer's question answered by a CPU copy of the trainer's replica.

The engine asks a ``ModelTryout`` of the active peer (``replica_of``: the trainer's model once it
has caught up with the collaboration). Training must never wait for an answer nor see its weights
touched, so the tryout works on a copy: taken on the training thread, where the model lives, as one
short job between two microbatches (``copy_to_cpu``: the tensors copied to the CPU in float32, no
gradients, no hooks, the training model untouched), and asked on a thread of the tryout's own
(a ``TrainingBridge`` of its own, as ``core.training.evaluation``'s evaluator does). A copy answers
for ``COPY_EVERY`` seconds: the questions asked meanwhile reuse it.

The copy holds the weights of the epoch it is labelled with, which the mode's optimizer says
(``ModeOptimizer.tryout_weights``): dedloc's are the model's own, where every collaborative step
lands; diloco's are its outer parameters (the anchor every peer of the last round stands on), while
the model's own move with every inner step and hold this peer's work not yet averaged.

A masked model (``albert-mlm``) guesses the word at each ``[MASK]``: the ``TOP_GUESSES`` best for
the first, and the best for each. A causal model (``llama-clm``) completes the text greedily, up to
``COMPLETION_TOKENS`` tokens, stopping at ``[SEP]`` (the end of a text in its training sequences).
Both kinds are driven alike: ``model(input_ids, attention_mask).logits``.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from core.data import TextTokenizer
from core.project import Manifest
from core.project.sections import ALBERT_MLM, LLAMA_CLM
from core.training.peer.project_peer import ProjectPeer
from core.training.peer.recipe import fetch_tokenizer
from core.util.errors import BarnraiseError
from core.worker.bridge import TrainingBridge

log = logging.getLogger(__name__)

COPY_EVERY = 60.0
"""Seconds a copy of the replica answers before a question takes a new one. The replica changes at
the collaboration's steps (seconds to minutes apart), so a copy per question would take the training
thread's time (and, for a large model, seconds of it) for answers that barely differ, while a
volunteer trying a few sentences in a row is answered by one and the same model."""
TOP_GUESSES = 5
COMPLETION_TOKENS = 20
MASK = "[MASK]"
"""How the engine writes every missing word in the text it hands over (``core.api.schema``)."""

Kind = Literal["masked", "causal"]


class QuestionRefused(BarnraiseError):
    """The text cannot be asked of this model; the message says why, for the volunteer."""


class ReplicaGone(BarnraiseError):
    """The peer stopped (its training thread is closed) before the weights could be copied."""


@dataclass(frozen=True)
class Replica:
    """The trainer's model and what asking it needs."""

    manifest: Manifest
    bridge: TrainingBridge
    """The bridge whose thread owns ``model`` (the training thread): the copy is made there."""
    model: torch.nn.Module
    epoch: Callable[[], int]
    """The epoch the model is at (read on the training thread, with the copy)."""
    tokenizer: Callable[[], TextTokenizer]
    """The project's tokenizer, called on the tryout's thread (it reads a file)."""
    weights: Callable[[], Mapping[str, np.ndarray] | None] | None = None
    """The weights of ``epoch`` by parameter name where they are not ``model``'s own (called on the
    training thread, with the copy: ``ModeOptimizer.tryout_weights``); None: ``model``'s own."""


@dataclass(frozen=True)
class Reply:
    kind: Kind
    guesses: list[tuple[str, float]]
    """masked: the first missing word's best guesses with their probabilities, best first."""
    fills: list[str]
    """masked: the best guess for each missing word, in order."""
    completion: str
    """causal: the text added, as it continues the question (a leading space if a new word)."""
    epoch: int
    copied_at: float
    """Unix time of the copy that answered."""


def replica_of(peer: object) -> Replica | None:
    """The replica of ``peer``, a trainer; None for any other peer, and until the trainer has
    caught up with the collaboration (before, its model holds the seeded initial weights or a
    state still being downloaded)."""
    if not isinstance(peer, ProjectPeer):
        return None
    trainer, optimizer = peer.trainer, peer.optimizer
    if trainer is None or optimizer is None:
        return None
    s = peer.settings
    return Replica(
        s.manifest,
        peer.bridge,
        trainer.model,
        epoch=lambda: optimizer.epoch,
        tokenizer=lambda: fetch_tokenizer(s.manifest, s.data_base, s.work_dir),
        weights=optimizer.tryout_weights,
    )


def model_kind(manifest: Manifest) -> Kind:
    """How a model of ``manifest``'s kind is asked (``QuestionRefused`` for a kind that cannot be)."""
    kind = manifest.model.kind
    if kind == ALBERT_MLM:
        return "masked"
    if kind == LLAMA_CLM:
        return "causal"
    raise QuestionRefused(f"a model of kind {kind!r} cannot be tried here")


class ModelTryout:
    """Answers questions to one replica; ``aclose`` ends its thread and drops the copy."""

    def __init__(
        self, replica: Replica, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.replica = replica
        self.kind = model_kind(replica.manifest)
        self._monotonic = monotonic
        self._bridge = TrainingBridge("tryout")
        self._lock = asyncio.Lock()  # one question at a time: they share the copy and the thread
        self._tokenizer: TextTokenizer | None = None
        self._copy: torch.nn.Module | None = None
        self._copied = (0, 0.0, -math.inf)  # epoch, Unix time, monotonic time of the copy
        self.copies = 0
        """How many copies of the weights were taken (each one a job on the training thread)."""

    async def answer(self, text: str) -> Reply:
        """Ask ``text`` (its missing words written ``[MASK]``): ``QuestionRefused`` if it cannot
        be asked of this model, ``ReplicaGone`` if the peer stopped."""
        async with self._lock:
            if self._tokenizer is None:
                self._tokenizer = await self._bridge.run(self.replica.tokenizer)
            tokenizer = self._tokenizer
            max_position = self.replica.manifest.model.max_position
            if self.kind == "masked":
                ids = await self._bridge.run(masked_ids, tokenizer, text, max_position)
            else:
                ids = await self._bridge.run(prompt_ids, tokenizer, text, max_position)
            model = await self._fresh_copy()
            epoch, copied_at, _ = self._copied
            if self.kind == "masked":
                guesses, fills = await self._bridge.run(guess_masks, model, tokenizer, ids)
                return Reply("masked", guesses, fills, "", epoch, copied_at)
            completion = await self._bridge.run(complete, model, tokenizer, ids, max_position)
            return Reply("causal", [], [], completion, epoch, copied_at)

    async def aclose(self) -> None:
        self._copy = None
        await self._bridge.aclose()

    async def _fresh_copy(self) -> torch.nn.Module:
        """The copy of the weights, taken anew when older than ``COPY_EVERY``."""
        if self._copy is not None and self._monotonic() - self._copied[2] < COPY_EVERY:
            return self._copy
        replica = self.replica

        def take() -> tuple[torch.nn.Module, int]:
            weights = replica.weights() if replica.weights is not None else None
            return copy_to_cpu(replica.model, weights), replica.epoch()

        try:
            model, epoch = await replica.bridge.run(take)
        except (RuntimeError, asyncio.CancelledError):
            # the peer stopped: its bridge refuses the job, or cancels it while closing (our own
            # cancellation is not that, and goes on)
            task = asyncio.current_task()
            if replica.bridge.closed and (task is None or not task.cancelling()):
                raise ReplicaGone("the peer stopped: its model is gone") from None
            raise
        self._copy = model
        self._copied = (epoch, time.time(), self._monotonic())
        self.copies += 1
        return model


def copy_to_cpu(
    model: torch.nn.Module, weights: Mapping[str, np.ndarray] | None = None
) -> torch.nn.Module:
    """On the thread that owns ``model`` (and ``weights``): a model of its own with the same
    weights, on the CPU, floating tensors in float32, in eval mode, without gradients or hooks;
    ``model`` is left as it was (its device, dtype, mode, gradients and hooks).

    ``weights``: parameters by name (as ``named_parameters`` gives them) to take instead of the
    model's, each reshaped to its parameter (a flat array will do); a name the model lacks is a
    ``ValueError``."""
    given = weights or {}
    named = dict(model.named_parameters())
    unknown = sorted(set(given) - set(named))
    if unknown:
        raise ValueError(f"the model has no parameters named {', '.join(unknown)}")
    # deepcopy takes the module's structure (tied weights stay tied: one entry per tensor), and
    # the tensors from ``memo``: copied straight to the CPU, never a second copy on a GPU
    memo: dict[int, Any] = {}
    with torch.no_grad():
        for name, parameter in named.items():
            source: torch.Tensor = parameter
            if name in given:
                source = torch.from_numpy(given[name]).reshape(parameter.shape)
            memo[id(parameter)] = torch.nn.Parameter(_on_cpu(source), requires_grad=False)
        for buffer in model.buffers():
            memo[id(buffer)] = _on_cpu(buffer)
        twin = copy.deepcopy(model, memo)
    for module in twin.modules():
        # the training bridge's interrupt checks (``TrainingBridge.watch``) would make a pause
        # interrupt the copy's forward passes too
        module._forward_pre_hooks.clear()
        module._forward_pre_hooks_with_kwargs.clear()
        module._forward_hooks.clear()
        module._forward_hooks_with_kwargs.clear()
        module._backward_hooks.clear()
        module._backward_pre_hooks.clear()
    twin.eval()
    return twin


def _on_cpu(tensor: torch.Tensor) -> torch.Tensor:
    dtype = torch.float32 if tensor.is_floating_point() else tensor.dtype
    return tensor.detach().to(device="cpu", dtype=dtype, copy=True)


# ---- on the tryout's thread ----------------------------------------------------------------------


def masked_ids(tokenizer: TextTokenizer, text: str, max_position: int) -> list[int]:
    """``[CLS] text [SEP]`` with each ``[MASK]`` as the mask token."""
    pieces = text.split(MASK)
    if len(pieces) < 2:
        raise QuestionRefused(
            "put [MASK] (or ___) where the model should guess the missing word, as in: the cat sat "
            "on the [MASK]"
        )
    ids = [tokenizer.cls_id]
    for i, piece in enumerate(pieces):
        if i:
            ids.append(tokenizer.mask_id)
        ids.extend(tokenizer.encode(piece))
    ids.append(tokenizer.sep_id)
    if len(ids) > max_position:
        raise QuestionRefused(
            f"the text is {len(ids) - 2} tokens long; this model reads at most "
            f"{max_position - 2}: shorten it"
        )
    return ids


def prompt_ids(tokenizer: TextTokenizer, text: str, max_position: int) -> list[int]:
    """``[CLS] text``, as the causal model's training sequences begin a text."""
    if MASK in text:
        raise QuestionRefused(
            "this project's model continues a text rather than filling in a missing word: type "
            "the start of a sentence, without [MASK] or ___"
        )
    ids = [tokenizer.cls_id, *tokenizer.encode(text)]
    if len(ids) >= max_position:  # no room left for a single new token
        raise QuestionRefused(
            f"the text is {len(ids) - 1} tokens long; this model reads at most "
            f"{max_position - 2} before it adds one: shorten it"
        )
    return ids


def word_scores(
    logits: torch.Tensor, tokenizer: TextTokenizer, *, keep: int | None = None
) -> torch.Tensor:
    """``logits`` (..., vocabulary) with the special tokens (but ``keep``) and the ids the tokenizer
    has no word for at minus infinity: what may be guessed."""
    scores = logits.float().clone()
    scores[..., tokenizer.vocab_size :] = -math.inf  # a model's vocabulary may be padded
    for special in tokenizer.special_ids:
        if special != keep:
            scores[..., special] = -math.inf
    return scores


def word(tokenizer: TextTokenizer, token: int) -> str:
    """A token as the volunteer reads it: a word piece that continues a word without its ``##``."""
    return tokenizer.decode([token]).removeprefix("##")


def guess_masks(
    model: torch.nn.Module, tokenizer: TextTokenizer, ids: list[int]
) -> tuple[list[tuple[str, float]], list[str]]:
    """The first mask's best guesses (probabilities among the words), and each mask's best."""
    with torch.inference_mode():
        logits = _logits(model, ids)[0]
    masks = [i for i, token in enumerate(ids) if token == tokenizer.mask_id]
    scores = word_scores(logits[masks], tokenizer)
    probabilities = torch.softmax(scores[0], dim=-1)
    top = torch.topk(scores[0], min(TOP_GUESSES, tokenizer.vocab_size))
    guesses = [
        (word(tokenizer, int(t)), float(probabilities[int(t)]))
        for t in top.indices
        if math.isfinite(float(scores[0, int(t)]))
    ]
    fills = [word(tokenizer, int(best)) for best in scores.argmax(dim=-1)]
    return guesses, fills


def complete(
    model: torch.nn.Module, tokenizer: TextTokenizer, ids: list[int], max_position: int
) -> str:
    """Greedy: the likeliest next token, again and again, until ``[SEP]``, ``COMPLETION_TOKENS``
    tokens or ``max_position``; the text they add to the question."""
    sequence = list(ids)
    with torch.inference_mode():
        while len(sequence) - len(ids) < COMPLETION_TOKENS and len(sequence) < max_position:
            scores = word_scores(_logits(model, sequence)[0, -1], tokenizer, keep=tokenizer.sep_id)
            token = int(scores.argmax())
            if token == tokenizer.sep_id:
                break
            sequence.append(token)
    added = sequence[len(ids) :]
    if not added:
        return ""
    # decoded with the question, so that a piece continuing its last word joins it
    head = tokenizer.decode(ids)
    whole = tokenizer.decode(sequence)
    return whole[len(head) :] if whole.startswith(head) else " " + tokenizer.decode(added)


def _logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    input_ids = torch.tensor([ids], dtype=torch.int64)
    logits: torch.Tensor = model(input_ids, torch.ones_like(input_ids)).logits
    return logits
