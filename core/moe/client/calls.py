"""ExpertCaller: how a DMoE layer on a torch worker thread finds experts and calls many at once.

A layer's forward and backward run on worker threads; the DHT, the Host and the connections live on
the event loop. ``ExpertCaller`` is the layer's only way across: each of its methods builds one
coroutine and blocks the worker on it with ``TrainingBridge.wait``, so a batch costs one hand-over
for the beam search and one for all of its expert calls, which run concurrently on the loop.

An expert call that fails for a reason of the network or of the expert's server is not an error of
the batch: it comes back as the exception, classified by ``failure_kind`` (busy, unknown,
unavailable, timeout, malformed, invalid, internal, unreachable) and counted in ``MoEStats``, and
the layer leaves that expert out of the mixture. Anything else (a bug) propagates. Which server
failed and why goes to the log, a line per server now and then (``FailureLog``), so that a trainer
whose calls to one server never get through says so.

With a ``ReceiptSender`` the caller also tells it the samples of every call a server answered
(whole and finite), which the trainer signs into receipts for that server (``receipts``).

Copies of a layer (``copy.deepcopy``, as the asynchronous trainer makes one per batch in flight)
share their caller: it holds the Host, the bridge, the beam search and its prefix cache, the
counters and the receipts, none of which may be duplicated.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from core.codecs import NONE, Codec
from core.dht import DHTError
from core.moe.client.beam_search import FoundExpert, MoEBeamSearch
from core.moe.client.receipts import ReceiptSender
from core.moe.remote import call_expert
from core.net.errors import (
    InvalidRequestError,
    MalformedResponseError,
    NetError,
    NotFoundError,
    RemoteInternalError,
    ResourceExhaustedError,
    UnavailableError,
    UnknownMethodError,
)
from core.net.host.address import PeerAddress
from core.net.host.host import Host
from core.util.clock import Clock, SystemClock
from core.util.errors import BarnraiseError, WireFormatError
from core.worker.bridge import TrainingBridge

log = logging.getLogger(__name__)

CALL_FAILURES: tuple[type[BaseException], ...] = (NetError, WireFormatError, TimeoutError, OSError)
"""What an expert call may fail with and leave the batch going (the expert is excluded)."""

FAILURE_KINDS = (
    "busy",
    "unknown",
    "unavailable",
    "timeout",
    "malformed",
    "invalid",
    "internal",
    "unreachable",
)


class MoEError(BarnraiseError):
    """A mixture-of-experts layer could not compute a batch; the message says why."""


class ExpertSearchError(MoEError):
    """The beam search could not read the DHT."""


class TooFewExpertsError(MoEError):
    """Fewer experts answered for some input than the layer needs (``k_min``, ``backward_k_min``)."""

    def __init__(self, message: str, *, phase: str, answered: int, needed: int) -> None:
        super().__init__(message)
        self.phase = phase
        self.answered = answered
        self.needed = needed


# checked in this order: DeadlineExceededError is a TimeoutError, ConnectionClosedError Unavailable
_KINDS: tuple[tuple[tuple[type[BaseException], ...], str], ...] = (
    ((ResourceExhaustedError,), "busy"),
    ((NotFoundError, UnknownMethodError), "unknown"),
    ((TimeoutError,), "timeout"),
    ((UnavailableError,), "unavailable"),
    ((MalformedResponseError, WireFormatError), "malformed"),
    ((InvalidRequestError,), "invalid"),
    ((RemoteInternalError,), "internal"),
)


def failure_kind(error: BaseException) -> str:
    """The statistics' name for why an expert call failed (one of ``FAILURE_KINDS``)."""
    for types, kind in _KINDS:
        if isinstance(error, types):
            return kind
    return "unreachable"  # dial, handshake, address or socket errors, a cancelled stream


GONE = frozenset({"unknown", "unavailable", "unreachable", "timeout"})
"""Failures that may mean the expert's server left (not "busy", which is a server at work)."""

Outcome = list[Tensor] | BaseException
"""An expert call's outputs, or why it failed."""


def failure_summary(outcomes: Sequence[Outcome]) -> Counter[str]:
    """How many of ``outcomes`` failed, per kind."""
    return Counter(failure_kind(o) for o in outcomes if isinstance(o, BaseException))


@dataclass(frozen=True, slots=True)
class ExpertCall:
    """One call: expert ``uid`` at ``address`` with ``tensors``; replies must have ``reply_shapes``."""

    uid: str
    address: str
    tensors: list[Tensor]
    reply_shapes: list[list[int]]


class MoEStats:
    """Counters of a layer's batches and expert calls (shared by its copies, safe across threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.batches = 0
        self.calls: Counter[str] = Counter()
        """Expert calls sent, per method ("forward", "backward")."""
        self.failures: dict[str, Counter[str]] = {"forward": Counter(), "backward": Counter()}
        """Failed expert calls, per method and kind."""
        self.too_few = 0
        """Batches that failed because too few experts answered."""

    def count_batch(self) -> None:
        with self._lock:
            self.batches += 1

    def count_calls(self, method: str, outcomes: Sequence[Outcome]) -> None:
        round_failures = failure_summary(outcomes)
        with self._lock:
            self.calls[method] += len(outcomes)
            self.failures[method].update(round_failures)

    def count_too_few(self) -> None:
        with self._lock:
            self.too_few += 1

    def snapshot(self) -> dict[str, Any]:
        """A consistent copy of the counters, as plain data."""
        with self._lock:
            return {
                "batches": self.batches,
                "calls": dict(self.calls),
                "failures": {method: dict(kinds) for method, kinds in self.failures.items()},
                "too_few": self.too_few,
            }


MAX_LOGGED_SERVERS = 1024
"""Servers whose failures ``FailureLog`` remembers (anyone may announce addresses)."""


class FailureLog:
    """Says in the log why calls to a server fail: its first failure at once, then at most one line
    per server every ``every`` seconds with the count since the last line.

    The share of calls answered says that calls fail, not which server or why; a trainer whose
    calls to one server all fail (an address it cannot reach, a relay that drops the stream) must
    say so without a line per call.
    """

    def __init__(self, every: float = 30.0, clock: Clock | None = None) -> None:
        self.every = every
        self.clock = clock or SystemClock()
        self._last: dict[str, float] = {}  # address -> when its last line was written
        self._unsaid: Counter[str] = Counter()  # address -> failures since that line

    def __len__(self) -> int:
        """Servers remembered now."""
        return len(self._last)

    def failed(self, address: str, error: BaseException) -> str | None:
        """Count one failed call to ``address``; the line written, if one is due."""
        now = self.clock.monotonic()
        self._unsaid[address] += 1
        last = self._last.get(address)
        if last is not None and now - last < self.every:
            return None
        count = self._unsaid.pop(address)
        self._last[address] = now
        if len(self._last) > MAX_LOGGED_SERVERS:  # the oldest lines' servers are forgotten
            oldest = min(self._last, key=self._last.__getitem__)
            del self._last[oldest]
            self._unsaid.pop(oldest, None)
        line = (
            f"expert calls to {address[:200]} fail: {failure_kind(error)} "
            f"({type(error).__name__}: {str(error)[:200]}), {count} since the last line"
        )
        log.info("%s", line)
        return line


class ExpertCaller:
    """Finds experts and calls them from worker threads, through ``bridge`` onto ``host``'s loop."""

    def __init__(
        self,
        host: Host,
        bridge: TrainingBridge,
        search: MoEBeamSearch,
        *,
        codec: Codec = NONE,
        forward_timeout: float | None = None,
        backward_timeout: float | None = None,
        receipts: ReceiptSender | None = None,
    ) -> None:
        for name, value in (("forward", forward_timeout), ("backward", backward_timeout)):
            if value is not None and not value > 0:
                raise ValueError(f"the {name} timeout must be positive seconds, not {value}")
        self.host = host
        self.bridge = bridge
        self.search = search
        self.codec = codec
        # None: the Host's call timeout, so a call never waits without a bound
        self.timeouts = {
            "forward": forward_timeout or host.config.call_timeout,
            "backward": backward_timeout or host.config.call_timeout,
        }
        self.stats = MoEStats()
        self.receipts = receipts
        self.failure_log = FailureLog()

    def __deepcopy__(self, memo: dict[int, Any]) -> ExpertCaller:
        return self  # the connections, the search cache and the counters are one per process

    def find(
        self, dim_scores: Sequence[Tensor], k: int, beam_size: int | None
    ) -> list[list[FoundExpert]]:
        """On a worker: each row's best ``k`` live experts (the gate's scores, detached)."""
        scores = [scores.detach() for scores in dim_scores]
        try:
            return self.bridge.wait(lambda: self.search.find_best_experts(scores, k, beam_size))
        except (NetError, DHTError, TimeoutError, OSError) as exc:
            raise ExpertSearchError(f"finding experts in the DHT failed: {exc}") from exc

    def call(self, method: str, calls: Sequence[ExpertCall]) -> list[Outcome]:
        """On a worker: every call at once; each outcome is the outputs or the call's failure."""
        if not calls:
            return []
        timeout = self.timeouts[method]
        outcomes = self.bridge.wait(lambda: self._call_all(method, calls, timeout))
        checked = [
            _finite(call.uid, outcome) for call, outcome in zip(calls, outcomes, strict=True)
        ]
        self.stats.count_calls(method, checked)
        if self.receipts is not None:
            for call, outcome in zip(calls, checked, strict=True):
                if not isinstance(outcome, BaseException):
                    self.receipts.count(call.address, method, int(call.tensors[0].shape[0]))
        return checked

    async def _call_all(
        self, method: str, calls: Sequence[ExpertCall], timeout: float
    ) -> list[Outcome]:
        return list(await asyncio.gather(*(self._call_one(method, c, timeout) for c in calls)))

    async def _call_one(self, method: str, call: ExpertCall, timeout: float) -> Outcome:
        try:
            target = PeerAddress.parse(call.address)  # from the DHT: anyone may have written it
            async with asyncio.timeout(timeout):  # the whole call: connecting, sending, the reply
                return await call_expert(
                    self.host,
                    target,
                    call.uid,
                    method,
                    call.tensors,
                    codec=self.codec,
                    timeout=timeout,
                    reply_shapes=call.reply_shapes,
                )
        except CALL_FAILURES as exc:
            self.failure_log.failed(call.address, exc)
            if failure_kind(exc) in GONE:
                # its server may have left and another taken the expert over: look again
                self.search.doubt(call.uid, call.address)
            return exc


def _finite(uid: str, outcome: Outcome) -> Outcome:
    """A reply with NaN or infinite values would poison the model: it counts as malformed."""
    if isinstance(outcome, BaseException):
        return outcome
    if all(bool(torch.isfinite(tensor).all()) for tensor in outcome):
        return outcome
    return MalformedResponseError(f"expert {uid[:64]} answered NaN or infinite values")
