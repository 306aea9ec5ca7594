"""ExpertServer: many experts answering calls on one Host, computed in batches on the training thread
(the caller's side of the same calls is ``core.moe.remote``).

Each (expert, method) has its own ``TaskPool``. One runner task picks, among the pools that are
ready, the one whose oldest call has waited longest (so a busy expert cannot starve a quiet one),
and runs that batch through ``TrainingBridge.run``. Batches run one at a time because the training
thread is single: queuing them on the bridge would only hide the wait from the pools' "busy" answer.

A handler validates the header, checks the pool has room, and only then reads the tensors, so a
refused call costs us no memory. Tensors holding NaN or infinities are refused before they join a
pool (``guard``), and each refusal is kept with the caller's PeerID (``refusals``, and
``on_refusal``), which a moderated project turns into evidence. Experiments delay or fail calls in
the handler too (``faults``), before the pool, so a delayed call never holds back the others.
Closing the server cancels the runner and answers every waiting call with ``UnavailableError``;
callers see a typed error, never a hang.

With a ``ReceiptBook`` the server also counts what it answered to each caller and takes
``moe.receipt``: trainers' signed receipts for that work, checked against those counts
(``receipts``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from core.moe.protocol import (
    BACKWARD,
    FORWARD,
    INFO,
    METHODS,
    RECEIPT,
    ExpertDone,
    ExpertInfo,
    ExpertRequest,
    InfoRequest,
    ReceiptReply,
    ReceiptRequest,
    ReplyHeader,
    recv_tensors,
    send_tensors,
    validate_request,
)
from core.moe.server.backend import ExpertBackend, PoisonedCall
from core.moe.server.faults import ServerFaults
from core.moe.server.pools import Batch, TaskPool
from core.moe.server.receipts import ReceiptBook
from core.net.errors import (
    InvalidRequestError,
    NotFoundError,
    RemoteInternalError,
    ResourceExhaustedError,
    UnavailableError,
)
from core.net.host.host import Host
from core.net.wire.rpc import CallContext
from core.net.wire.stream import Stream
from core.trust.peer_id import PeerID
from core.util.tasks import BackgroundTasks
from core.worker.bridge import TrainingBridge
from core.worker.errors import Interrupted

log = logging.getLogger(__name__)

KEPT_REFUSALS = 256
"""Refused calls remembered (the newest): enough to see who sends poison, bounded against a flood."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A call refused because its tensors would have spoiled the expert."""

    caller: PeerID
    uid: str
    method: str
    reason: str


class RefusalSink(Protocol):
    """What turns refused calls into evidence (``core.training.moderation.call_evidence.RefusedCalls``)."""

    def refused(self, call: Refusal) -> None: ...

    def start(self) -> None: ...

    async def close(self) -> None: ...


class ExpertServer:
    """Serves ``moe.info``, ``moe.forward`` and ``moe.backward`` for ``backends`` on ``host``, and
    ``moe.receipt`` when given a ``receipts`` book."""

    def __init__(
        self,
        host: Host,
        bridge: TrainingBridge,
        backends: Sequence[ExpertBackend],
        *,
        max_queue: int | None = None,
        max_wait: float = 0.01,
        faults: ServerFaults | None = None,
        on_refusal: Callable[[Refusal], None] | None = None,
        receipts: ReceiptBook | None = None,
    ) -> None:
        self._host = host
        self.receipts = receipts
        """What this server answered per trainer, and the receipts they signed for it."""
        self.refusals: deque[Refusal] = deque(maxlen=KEPT_REFUSALS)
        self.refused = 0
        """Calls refused for non-finite tensors, all experts together."""
        self._on_refusal = on_refusal
        self.faults = faults
        self._bridge = bridge
        self.backends = {backend.uid: backend for backend in backends}
        if len(self.backends) != len(backends):
            raise ValueError("two experts share one uid")
        self._infos = {uid: backend.info for uid, backend in self.backends.items()}
        self._wake = asyncio.Event()
        self.pools: dict[tuple[str, str], TaskPool] = {}
        for uid, backend in self.backends.items():
            for method in METHODS:
                self.pools[uid, method] = TaskPool(
                    f"{uid}.{method}",
                    max_batch=backend.max_batch,
                    max_queue=max_queue if max_queue is not None else 4 * backend.max_batch,
                    max_wait=max_wait,
                    on_submit=self._wake.set,
                )
        self._tasks = BackgroundTasks("expert-server")
        self._closed = False

    async def start(self) -> None:
        router = self._host.router
        router.add(INFO, self._on_info)
        router.add_stream(FORWARD, self._on_forward)
        router.add_stream(BACKWARD, self._on_backward)
        if self.receipts is not None:
            router.add(RECEIPT, self._on_receipt)
        self._tasks.spawn("runner", self._run())

    async def close(self) -> None:
        """Stop answering, cancel the runner and fail every waiting call with ``UnavailableError``."""
        if self._closed:
            return
        self._closed = True
        for name in (INFO.name, FORWARD.name, BACKWARD.name, RECEIPT.name):
            self._host.router.remove(name)
        await self._tasks.close()
        for pool in self.pools.values():
            pool.fail_all(UnavailableError("the expert server is closing"))

    # ---- handlers --------------------------------------------------------------------------------

    async def _on_info(self, ctx: CallContext, request: InfoRequest) -> ExpertInfo:
        return self._info(request.uid)

    async def _on_forward(
        self, ctx: CallContext, request: ExpertRequest, stream: Stream
    ) -> ExpertDone:
        return await self._serve(ctx, "forward", request, stream)

    async def _on_backward(
        self, ctx: CallContext, request: ExpertRequest, stream: Stream
    ) -> ExpertDone:
        return await self._serve(ctx, "backward", request, stream)

    async def _on_receipt(self, ctx: CallContext, request: ReceiptRequest) -> ReceiptReply:
        if self._closed or self.receipts is None:
            raise UnavailableError("the expert server is closing")
        return ReceiptReply(self.receipts.accept(request.receipt, ctx.peer))

    def _info(self, uid: str) -> ExpertInfo:
        if self._closed:
            raise UnavailableError("the expert server is closing")
        info = self._infos.get(uid)
        if info is None:
            raise NotFoundError(f"no expert {uid[:64]!r} on this server")
        return info

    async def _serve(
        self, ctx: CallContext, method: str, request: ExpertRequest, stream: Stream
    ) -> ExpertDone:
        codec = validate_request(self._info(request.uid), method, request)
        if self.faults is not None:  # here, not in the runner: a delay holds back only this call
            await self.faults.apply(request.uid, method)
        pool = self.pools[request.uid, method]
        pool.check_room(request.batch)  # before reading: a refused call costs no memory
        tensors = await recv_tensors(stream, codec, request.shapes)
        try:
            # here, alone: in a pool its rows would fail the other callers' batch with it
            self.backends[request.uid].refuse_non_finite(tensors, f"the {method} call's tensors")
        except PoisonedCall as exc:
            self._refuse(Refusal(ctx.peer, request.uid, method, str(exc)))
            raise InvalidRequestError(str(exc)) from None
        future = pool.submit(tensors, asyncio.get_running_loop().time())
        try:
            outputs = await future
        finally:
            future.cancel()  # the caller left: the pool skips the call instead of computing it
        await stream.send(
            ReplyHeader(codec.wire_id, [list(out.shape) for out in outputs]).to_wire()
        )
        await send_tensors(stream, codec, outputs)
        if self.receipts is not None:
            # before the call ends: a trainer counts it only once the end has come
            self.receipts.served(ctx.peer, method, request.batch)
        return ExpertDone()

    def _refuse(self, refusal: Refusal) -> None:
        self.refused += 1
        self.refusals.append(refusal)
        log.info("refused a call from %s: %s", refusal.caller, refusal.reason)
        if self._on_refusal is not None:
            self._on_refusal(refusal)

    # ---- the runner ------------------------------------------------------------------------------

    def _pick(self, now: float) -> tuple[tuple[str, str], TaskPool] | None:
        ready = [(key, pool) for key, pool in self.pools.items() if pool.ready(now)]
        return min(ready, key=lambda item: item[1].oldest() or now, default=None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            picked = self._pick(now)
            if picked is None:
                self._wake.clear()  # no await since _pick: a submit cannot slip in between
                dues = [due for pool in self.pools.values() if (due := pool.due_at()) is not None]
                timeout = max(0.0, min(dues) - now) if dues else None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
                continue
            (uid, method), pool = picked
            batch = pool.take()
            if batch.tasks:
                await self._compute(self.backends[uid], method, batch)

    async def _compute(self, backend: ExpertBackend, method: str, batch: Batch) -> None:
        try:
            outputs = await self._bridge.run(_run_batch, backend, method, batch)
        except asyncio.CancelledError:
            batch.fail(UnavailableError("the expert server is closing"))
            raise
        except Interrupted:
            batch.fail(ResourceExhaustedError(f"expert {backend.uid} is busy: paused"))
        except PoisonedCall as exc:
            log.warning("%s", exc)
            batch.fail(InvalidRequestError(str(exc)))
        except Exception as exc:
            log.exception("expert %s failed on a %s batch", backend.uid, method)
            batch.fail(RemoteInternalError(f"expert {backend.uid} failed: {type(exc).__name__}"))
        else:
            batch.deliver(outputs)


def _run_batch(backend: ExpertBackend, method: str, batch: Batch) -> list[torch.Tensor]:
    """On the training thread: merge the calls, compute, return the batch's results."""
    merged = batch.merged()
    if method == "forward":
        return backend.forward(merged)
    count = len(backend.input_shapes)
    return backend.backward(merged[:count], merged[count:])
