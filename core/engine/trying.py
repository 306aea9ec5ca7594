"""ModelTrial: "try the model", the active project's latest replica asked a volunteer's question.

The answer comes from the trainer's replica at the epoch it names (``core.training.peer.tryout``: a
CPU copy of the weights the mode says hold that epoch, the model's own in dedloc and the outer
parameters in diloco, whose model moves with every inner step; taken between two microbatches and
reused for ``COPY_EVERY`` seconds, asked on a thread of its own, so training never waits). A paused
peer keeps its model, so it answers too. When there is no model to ask the answer says why, in
plain words: no project attached; a dmoe project (its experts are spread over many computers: no
single model); the model not here yet (the peer has not started, or is still loading the
collaboration's state); or the engine unloaded it (the peer stopped since a copy answered). A
question that cannot be asked (empty, too long, no missing word for a masked model) is
``InvalidArgument``.

Torch loads only with the tryout, once the active peer is ready (it has loaded torch by then): an
engine that never trained answers without it. The copy is dropped ``KEEP_COPY`` seconds after the
last question, and when the peer it came from goes away, so that its memory is not held for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from core.api.schema import (
    Guess,
    ModelAnswer,
    ModelAnswerCode,
    filled_in,
    question_problem,
    with_masks,
)
from core.engine.errors import InvalidArgument
from core.engine.projects import ProjectRunner, ProjectSlot
from core.project import AnyManifest, DmoeManifest, ManifestError, load_any_manifest
from core.util.blocking import BlockingPool
from core.util.tasks import BackgroundTasks

if TYPE_CHECKING:
    from core.training.peer.tryout import ModelTryout

log = logging.getLogger(__name__)

KEEP_COPY = 600.0
"""Seconds after the last question that the copy of the model is kept (for a large model, gigabytes
of the computer's memory): a volunteer who comes back later waits for one new copy."""


class ModelTrial:
    def __init__(
        self,
        runner: Callable[[], ProjectRunner | None],
        blocking: BlockingPool,
        *,
        keep: float = KEEP_COPY,
    ) -> None:
        """``runner``: the active project's runner, asked at each question (switches replace it)."""
        self._runner = runner
        self._blocking = blocking
        self._keep = keep
        self._tasks = BackgroundTasks("model-trial")
        self._tryout: ModelTryout | None = None
        self._peer: object | None = None
        """The peer the tryout copies from."""
        self._project: str | None = None
        """The project whose model last answered: while its peer is gone, the model was unloaded
        (forgotten when no project is active, or a new peer of it is still loading the state)."""
        self._forget: asyncio.Task[None] | None = None

    async def ask(self, text: str) -> ModelAnswer:
        problem = question_problem(text)
        if problem is not None:
            raise InvalidArgument(problem)
        runner = self._runner()
        if runner is None:
            await self._drop()
            self._project = None
            return _unanswered(
                None,
                "no_project",
                "No project is attached: join one, and once this computer has trained with it, "
                "its model can be tried here.",
            )
        name = runner.slot.name
        manifest = runner.manifest or await self._read(runner.slot)
        if isinstance(manifest, DmoeManifest):
            return _unanswered(
                name,
                "dmoe_project",
                f"{name} is a mixture-of-experts project: its experts are spread over the "
                "computers that host them, and no single computer holds a whole model to ask.",
            )
        peer = runner.peer if runner.state == "ready" else None
        if peer is None:
            await self._drop()
            return self._no_model(runner)
        tryout = await self._tryout_of(peer)
        if tryout is None:  # a peer still catching up (a new one, if a model answered before)
            self._project = None
            waiting = runner.status().waiting_for
            return _unanswered(
                name,
                "not_ready",
                "The model is not here yet: this computer is still loading the collaboration's "
                "model" + (f" ({waiting})." if waiting else "."),
            )
        return await self._answer(tryout, name, text)

    async def close(self) -> None:
        await self._tasks.close()
        await self._drop()

    # ---- inside ----------------------------------------------------------------------------------

    async def _answer(self, tryout: ModelTryout, name: str, text: str) -> ModelAnswer:
        from core.training.peer.tryout import (  # noqa: PLC0415 - torch: loaded with the tryout
            QuestionRefused,
            ReplicaGone,
        )

        self._project = name
        self._keep_until_idle()
        try:
            reply = await tryout.answer(with_masks(text))
        except QuestionRefused as exc:
            raise InvalidArgument(str(exc)) from None
        except ReplicaGone:
            await self._drop()
            return _unloaded(name)
        if reply.kind == "masked":
            return ModelAnswer(
                name,
                "answered",
                kind="masked",
                guesses=[Guess(word, probability) for word, probability in reply.guesses],
                text=filled_in(text, reply.fills),
                epoch=reply.epoch,
                copied_at=reply.copied_at,
            )
        return ModelAnswer(
            name,
            "answered",
            kind="causal",
            text=text.rstrip() + reply.completion,
            completion=reply.completion.strip(),
            epoch=reply.epoch,
            copied_at=reply.copied_at,
        )

    async def _tryout_of(self, peer: object) -> ModelTryout | None:
        """The tryout of ``peer``'s replica (made afresh for a new peer); None until it has one."""
        if self._peer is peer:
            return self._tryout
        await self._drop()  # another peer's copy
        from core.training.peer.tryout import (  # noqa: PLC0415 - torch: loaded with the tryout
            ModelTryout,
            QuestionRefused,
            replica_of,
        )

        replica = replica_of(peer)
        if replica is None:
            return None
        try:
            self._tryout = ModelTryout(replica)
        except QuestionRefused as exc:  # a model kind that cannot be tried
            raise InvalidArgument(str(exc)) from None
        self._peer = peer
        return self._tryout

    def _no_model(self, runner: ProjectRunner) -> ModelAnswer:
        """Why ``runner`` has no model to ask: its peer is not ready."""
        name = runner.slot.name
        if runner.state == "starting":
            why = f"the peer of {name} is starting (joining the collaboration, building the model)"
        elif self._project == name:  # a model of this project answered, and its peer is gone
            return _unloaded(name)
        elif runner.state == "failed" and runner.error:
            why = f"the peer of {name} cannot run: {runner.error}"
        else:
            why = f"it is loaded when this computer starts contributing to {name}"
        return _unanswered(name, "not_ready", f"The model is not here yet: {why}.")

    async def _read(self, slot: ProjectSlot) -> AnyManifest | None:
        """The slot's manifest, for its kind, before the peer has read it (None if unreadable:
        the peer's start will say why)."""
        try:
            return await self._blocking.run(load_any_manifest, slot.manifest)
        except (ManifestError, OSError):
            return None

    def _keep_until_idle(self) -> None:
        if self._forget is not None:
            self._forget.cancel()
        self._forget = self._tasks.spawn("forget-copy", self._forget_later())

    async def _forget_later(self) -> None:
        await asyncio.sleep(self._keep)
        log.info("the copy of the model for trying it was dropped: unused for %.0f s", self._keep)
        self._forget = None
        await self._drop()

    async def _drop(self) -> None:
        tryout, self._tryout, self._peer = self._tryout, None, None
        if tryout is not None:
            with contextlib.suppress(Exception):  # its thread ends with its current job anyway
                await tryout.aclose()


def _unanswered(project: str | None, code: ModelAnswerCode, reason: str) -> ModelAnswer:
    return ModelAnswer(project, code, reason)


def _unloaded(name: str) -> ModelAnswer:
    return _unanswered(
        name,
        "unloaded",
        f"The engine unloaded {name}'s model (its peer stopped); it is loaded again when this "
        "computer contributes to it again.",
    )
