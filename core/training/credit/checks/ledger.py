"""WorkLedger: a trainer's receipts for its recent epochs, and the calls a checker makes for them.

On the training thread, before each forward pass, whether the batch is new at these parameters
(``fresh``), and after each backward pass (``record``): the receipt of the microbatch, and the batch
kept on the host. On the loop, the optimizer files what it counted: ``cut`` takes the open
receipts when an epoch goes to its round, ``restore`` puts them back when the round was short and
the epoch goes on, ``seal`` files them under the epoch that landed, and ``drop`` forgets them when
the samples are dropped (a state downloaded). The last ``KEPT`` sealed epochs are served: their
receipts whole, a batch by its index.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from core.net.errors import InvalidRequestError, NotFoundError, UnavailableError
from core.net.host.host import Host
from core.net.wire.rpc import CallContext
from core.training.credit.checks.fingerprint import (
    Batch,
    Fingerprinter,
    batch_digest,
    batch_tensors,
    pack_batch,
    to_bytes,
)
from core.training.credit.checks.linger import Linger
from core.training.credit.checks.receipts import (
    MAX_RECEIPTS,
    WORK_BATCH,
    WORK_RECEIPTS,
    BatchRequest,
    EpochReceipts,
    ReceiptsRequest,
    SampledBatch,
    WorkReceipt,
)

KEPT = 8
"""Sealed epochs served: a checker asks within seconds of an epoch landing."""

Recorder = Callable[[Any, float], None]
"""What the training loop calls after each backward pass: (batch, loss)."""


@dataclass(frozen=True, slots=True)
class Entry:
    receipt: WorkReceipt
    batch: Batch
    """On the host."""


class WorkLedger:
    """One trainer's receipts (see the module's map)."""

    def __init__(
        self,
        parameters: Sequence[torch.nn.Parameter],
        precision: str,
        params_epoch: Callable[[], int],
    ) -> None:
        """``params_epoch``: the epoch of the parameters the next gradient is computed at, read on
        the training thread."""
        self.parameters = list(parameters)
        self._fingerprint = Fingerprinter(parameters)
        self.precision = precision
        self._params_epoch = params_epoch
        self._lock = threading.Lock()
        self._open: list[Entry] = []
        self._sealed: OrderedDict[int, list[Entry]] = OrderedDict()
        self.leaving = False
        self.linger = Linger()
        """Since the last epoch sealed or check call (a stopping trainer waits on it)."""
        """The trainer is stopping: a check is answered that it is going (it was not reached),
        never "no such method" (which fails it) while its host still answers."""

    # ---- the training thread ---------------------------------------------------------------------

    def params_epoch(self) -> int:
        return max(0, self._params_epoch())

    def last(self) -> WorkReceipt | None:
        """The newest receipt of the open epoch."""
        with self._lock:
            return self._open[-1].receipt if self._open else None

    def record(self, batch: Any, loss: float) -> None:
        """The microbatch whose gradients are in ``.grad`` now (before they are accumulated)."""
        tensors = batch_tensors(batch)
        host = {name: t.detach().to("cpu") for name, t in tensors.items()}
        samples = int(next(iter(host.values())).shape[0])
        receipt = WorkReceipt(
            samples=samples,
            digest=batch_digest(host),
            loss=float(loss),
            fingerprint=to_bytes(self._fingerprint.read()),
            params_epoch=self.params_epoch(),
            parameters=self.parameters_now(),
        )
        self.file(receipt, host)

    def parameters_now(self) -> bytes:
        """The parameters' values at the fingerprint's coordinates, as a receipt says them."""
        return to_bytes(self._fingerprint.read_parameters())

    def fresh(self, batch: Any) -> bool:
        """Whether ``batch`` is not among the open epoch's receipts at the parameters the next
        gradient is computed at: the same batch at the same parameters gives the same gradient,
        so a trainer computes it once (a small or repeating dataset meets it again)."""
        host = {name: t.detach().to("cpu") for name, t in batch_tensors(batch).items()}
        key = (batch_digest(host), self.params_epoch())
        with self._lock:
            return all((e.receipt.digest, e.receipt.params_epoch) != key for e in self._open)

    def file(self, receipt: WorkReceipt, batch: Batch) -> None:
        """Keep ``receipt`` for the batch (on the host) among the open epoch's."""
        with self._lock:
            if len(self._open) < MAX_RECEIPTS:
                self._open.append(Entry(receipt, batch))

    # ---- the loop --------------------------------------------------------------------------------

    def cut(self) -> list[Entry]:
        with self._lock:
            taken, self._open = self._open, []
        return taken

    def restore(self, entries: list[Entry]) -> None:
        with self._lock:
            self._open = entries + self._open

    def seal(self, epoch: int, entries: list[Entry]) -> None:
        self._sealed.pop(epoch, None)
        self._sealed[epoch] = entries
        self.linger.touch()
        while len(self._sealed) > KEPT:
            self._sealed.popitem(last=False)

    def drop(self) -> None:
        with self._lock:
            self._open = []

    def sealed(self, epoch: int) -> list[Entry] | None:
        return self._sealed.get(epoch)

    # ---- serving checkers ------------------------------------------------------------------------

    def serve(self, host: Host) -> None:
        host.router.add(WORK_RECEIPTS, self._on_receipts)
        host.router.add(WORK_BATCH, self._on_batch)

    @staticmethod
    def stop_serving(host: Host) -> None:
        host.router.remove(WORK_RECEIPTS.name)
        host.router.remove(WORK_BATCH.name)

    def leave(self) -> None:
        """The trainer is stopping: checks from now on are told so (``leaving``)."""
        self.leaving = True

    async def _on_receipts(self, ctx: CallContext, request: ReceiptsRequest) -> EpochReceipts:
        entries = self._entries(request.epoch)
        return EpochReceipts(request.epoch, self.precision, [e.receipt for e in entries])

    async def _on_batch(self, ctx: CallContext, request: BatchRequest) -> SampledBatch:
        entries = self._entries(request.epoch)
        if not 0 <= request.index < len(entries):
            raise InvalidRequestError(f"epoch {request.epoch} has no microbatch {request.index}")
        return pack_batch(entries[request.index].batch)

    def _entries(self, epoch: int) -> list[Entry]:
        self.linger.touch()
        if self.leaving:
            raise UnavailableError("this trainer is leaving")
        entries = self._sealed.get(epoch)
        if entries is None:
            raise NotFoundError(f"no receipts of epoch {epoch} are kept here")
        return entries


Forgery = Callable[[WorkLedger], Recorder]
"""Makes a recorder that lies (a free rider's, ``core.swarm.byzantine``): the seam through which
the demo and the benchmark try the checks."""
