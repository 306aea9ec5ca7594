"""Byzantine peers on purpose: a trainer that misbehaves, so that the defences can be shown to work.

Robust aggregation (CenteredClip and screening at the reducers) and reducer verification are only
worth their cost if a bad peer really wrecks the plain mean and really does not wreck the defended
run. This module makes one peer bad in these ways, with the real code paths around it:

- ``scale``          its gradients x1000 (a broken GPU, a bad overclock, or malice);
- ``sign-flip``      its gradients x-10 (pushing the model uphill, ten times harder than one peer may);
- ``noise``          its gradients replaced by Gaussian noise 100 times their RMS (garbage);
- ``nan``            its gradients all NaN (a numerical blow-up);
- ``lying-reducer``  as a reducer, it returns its part's aggregate shifted by 10 times the chunk's
  RMS (it sends honest data; it lies where only reducer verification can see it).

Any of them may also inflate its claims (``Misbehaviour.claim``): the samples it says it computed,
as the weight it averages with and in the landed epochs its records credit, are that many times
what it computed (a claimed weight is what a plain weighted mean and CenteredClip weigh by). It
may also skip work it counts (``computes``: in dedloc a ``FreeRider`` forging its receipts, in
diloco a ``StepRider`` dropping the gradients of inner steps it still counts and files) and
refuse the backbone's checks of it (``refuses``: a ``Refuser``, a ``RoundRefuser``); in dedloc
hide from the checks of the epochs it faked (``hides``, a ``Hider``: it answers them "busy"); in
diloco send the model's last public move instead of its own work (``copies``, a ``Copier``: what
every member received, so a copy that costs nothing to make).

The gradient attacks are a ``GradientAttack`` the optimizer applies to what it sends before it
goes to averaging: dedloc's mean gradient (``DedlocOptimizer.tamper``), diloco's
pseudo-gradient (``DilocoOptimizer.tamper``), installed by ``Misbehaviour.install`` through the
training peer's ``Misbehaving`` seam (``core.training.settings``); the peer is otherwise honest
(it reduces honestly, applies the collaboration's aggregate, reports its true samples; in diloco
it keeps none of its attack for a later round), so what is measured is the defence against its
data alone. The lying reducer is a ``LyingReducer``
around the honest ``PartReducer`` of a round: everything it reduces is shifted, for every receiver
and for itself alike.

``forge_state`` makes a donor serve a tampered state under its true metadata (a consistent header,
other bytes): what verified downloads are for.

Nothing here runs in a volunteer's peer: the ways in are the swarm's ``--byzantine K`` demo flag
(``barnraise peer --attack KIND``, hidden), ``benchmarks/robust/byzantine_losses.py`` and the tests.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import numpy as np
import torch

from core.averaging.allreduce import AllReduce
from core.averaging.round.reducer import ChunkResult, PartReducer
from core.averaging.sharing.state import PackedProvider, PackedState, StateSharing
from core.codecs import NONE
from core.codecs.arrays import F32
from core.codecs.chunks import decode, encode
from core.net.errors import UnavailableError
from core.training.credit.checks import Forgery, Recorder, WorkLedger
from core.training.credit.checks.fingerprint import batch_digest, batch_tensors
from core.training.credit.checks.receipts import (
    FINGERPRINT_BYTES,
    WORK_RECEIPTS,
    ReceiptsRequest,
    WorkReceipt,
)
from core.training.diloco.checks.receipts import ROUND_BATCH, ROUND_RECEIPT, ROUND_WORK
from core.util.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.averaging import Averager
    from core.net.host.host import Host
    from core.net.wire.rpc import CallContext
    from core.training.diloco.state import DilocoState
    from core.training.settings import Tamperable


class Attack(StrEnum):
    SCALE = "scale"
    SIGN_FLIP = "sign-flip"
    NOISE = "noise"
    NAN = "nan"
    LYING_REDUCER = "lying-reducer"

    @property
    def gradients(self) -> bool:
        """Whether it tampers with the peer's gradients (else with what it reduces)."""
        return self is not Attack.LYING_REDUCER

    @classmethod
    def parse(cls, text: str) -> Attack:
        try:
            return cls(text.strip().lower())
        except ValueError:
            kinds = ", ".join(kind.value for kind in cls)
            raise ConfigError(f"no attack named {text!r}; the attacks are: {kinds}") from None


DEFAULT_STRENGTH = {
    Attack.SCALE: 1000.0,
    Attack.SIGN_FLIP: -10.0,
    Attack.NOISE: 100.0,
    Attack.NAN: math.nan,
    Attack.LYING_REDUCER: 10.0,
}
"""The demo's figures: x1000, sign-flipped x10; noise and the reducer's shift strong enough that
the plain mean visibly diverges (their size relative to the honest values is what matters)."""


@dataclass(frozen=True)
class Misbehaviour:
    """What one Byzantine peer does, and how hard."""

    attack: Attack
    strength: float | None = None
    """The factor (``scale``, ``sign-flip``), the noise's RMS or the reducer's shift in units of
    the honest values' RMS; None: the attack's default (``DEFAULT_STRENGTH``)."""
    seed: int = 0
    """The noise's seed: a run is reproducible."""
    claim: float = 1.0
    """Samples it claims per sample it computed (``Tamperable.claim``); 1: honest claims."""
    computes: float = 1.0
    """The share of the microbatches (dedloc, ``FreeRider``) or inner steps (diloco,
    ``StepRider``) it counts that it computes; 1: all."""
    rides_from: int = 0
    """The epoch from which it computes only ``computes`` of its work: before it, it computes it
    all and earns the checks' trust first."""
    refuses: bool = False
    """It serves no receipts: the backbone's checks are answered "no such method"."""
    hides: bool = False
    """It answers "busy" to every check of an epoch from ``rides_from`` on, and serves the
    others (dedloc): the checks of the epochs it faked cannot judge it."""
    copies: bool = False
    """From ``rides_from`` on it sends the model's last public move (the anchor's step over the
    last round, over the outer learning rate) as its pseudo-gradient, whatever it computed
    (diloco)."""

    def __post_init__(self) -> None:
        if isinstance(self.rides_from, bool) or self.rides_from < 0:
            raise ConfigError(f"free riding starts at an epoch, 0 or later, not {self.rides_from}")
        if self.strength is not None and not math.isfinite(self.strength):
            raise ConfigError(f"an attack's strength must be a finite number, not {self.strength}")
        if self.copies and not self.attack.gradients:
            raise ConfigError("a lying reducer sends honest data: it copies nothing")
        if not 0.0 <= self.computes <= 1.0:
            raise ConfigError(f"a peer computes a share in [0, 1] of its work, not {self.computes}")
        if not (math.isfinite(self.claim) and self.claim >= 1):
            raise ConfigError(
                f"an inflated claim must be a finite factor of at least 1, not {self.claim}"
            )

    @property
    def factor(self) -> float:
        return DEFAULT_STRENGTH[self.attack] if self.strength is None else self.strength

    def describe(self) -> str:
        """What it does, in words (for the log and the demo's output)."""
        f = self.factor
        claims = f", claiming {self.claim:g}x the samples it computed" if self.claim != 1 else ""
        rides = (
            f", computing {self.computes:.0%} of the microbatches it counts"
            + (f" from epoch {self.rides_from}" if self.rides_from else "")
            if self.computes < 1
            else ""
        )
        copies = (
            ", sending the model's last move as its work"
            + (f" from epoch {self.rides_from}" if self.rides_from else "")
            if self.copies
            else ""
        )
        refuses = (
            ", refusing the work checks"
            if self.refuses
            else ", hiding from the checks of the epochs it faked"
            if self.hides
            else ""
        )
        return (
            {
                Attack.SCALE: f"its gradients x{f:g}",
                Attack.SIGN_FLIP: f"its gradients x{f:g} (sign-flipped)",
                Attack.NOISE: f"Gaussian noise {f:g} times its gradients' RMS instead of them",
                Attack.NAN: "NaN instead of its gradients",
                Attack.LYING_REDUCER: f"its part's aggregate shifted by {f:g} times its RMS",
            }[self.attack]
            + claims
            + rides
            + copies
            + refuses
        )

    def install(self, optimizer: Tamperable, averager: Averager) -> None:
        """Make a training peer misbehave: tamper with its gradients (or, in diloco, send a
        copy), or lie as a reducer; and inflate its claims, skip work it counts (forging its
        receipts in dedloc, filing steps it did not take in diloco) or refuse the checks."""
        optimizer.claim = self.claim
        if isinstance(optimizer, Ridable):
            if self.hides:
                raise ConfigError("hiding from the checks of faked epochs is tried in dedloc only")
            if self.computes < 1 or self.refuses:
                steps = StepRider(self.computes, self.rides_from)
                optimizer.rides = steps if not self.refuses else RoundRefuser(steps, averager.host)
        elif self.computes < 1 or self.refuses or self.hides:
            if not isinstance(optimizer, Forgeable):
                raise ConfigError("free riding is tried where work is checked: dedloc or diloco")
            rider: Forgery = FreeRider(self.computes, self.rides_from)
            if self.refuses:
                rider = Refuser(rider, averager.host)
            elif self.hides:
                rider = Hider(rider, averager.host, self.rides_from)
            optimizer.forge = rider
        if self.copies and not isinstance(optimizer, Ridable):
            raise ConfigError("copying the model's last move is tried in diloco only")
        if self.attack.gradients:
            attack = self.gradient_attack()
            optimizer.tamper = (
                Copier(cast("Ridable", optimizer), attack, self.rides_from)
                if self.copies
                else attack
            )
        else:
            averager.round_hook = self.lie_in

    def gradient_attack(self) -> GradientAttack:
        if not self.attack.gradients:
            raise ConfigError(f"the {self.attack} attack does not touch gradients")
        return GradientAttack(self)

    def lie_in(self, round_: AllReduce) -> LyingReducer | None:
        """Make this round's reducer (ours) lie; None when we reduce nothing in it.

        Called with each round this peer runs, before it starts (the averager's ``round_hook``)."""
        if self.attack is not Attack.LYING_REDUCER:
            raise ConfigError(f"the {self.attack} attack is not a reducer's")
        if round_.reducer is None:
            return None
        liar = LyingReducer(round_.reducer, self.factor)
        # duck-typed: everything but ``result`` goes to the honest reducer
        round_.reducer = cast(PartReducer, liar)
        return liar


@runtime_checkable
class Forgeable(Protocol):
    """An optimizer whose work receipts a free rider can forge (``core.training.credit.checks``)."""

    forge: Forgery | None


def computed(counted: int, share: float) -> bool:
    """Whether a free rider computing ``share`` of its work computes the piece after the
    ``counted`` before it: the computed ones spread evenly, ``share`` of any run of them."""
    return math.floor((counted + 1) * share) > math.floor(counted * share)


@runtime_checkable
class Ridable(Protocol):
    """An optimizer whose inner steps a free rider may leave uncomputed while it counts them,
    and whose anchor it may copy from (diloco, ``DilocoOptimizer.rides``)."""

    rides: Callable[[int], bool] | None

    @property
    def diloco(self) -> DilocoState: ...

    @property
    def epoch(self) -> int: ...


class StepRider:
    """Of the inner steps it counts from epoch ``from_epoch`` on, computes the share ``computes``
    (spread evenly) and drops the gradients of the others (``DilocoOptimizer.rides``): their
    samples are counted, sent as the round's weight and filed in its receipt with their batches,
    as a free rider's would be; only its work lacks them."""

    def __init__(self, computes: float, from_epoch: int = 0) -> None:
        self.computes = computes
        self.from_epoch = from_epoch
        self._counted = 0
        self.dropped = 0
        """Steps whose gradient it dropped (the tests check that it really ran)."""

    def __call__(self, epoch: int) -> bool:
        if epoch < self.from_epoch:
            return False
        real = computed(self._counted, self.computes)
        self._counted += 1
        self.dropped += not real
        return not real


class RoundRefuser:
    """Takes back the round receipts its trainer serves at its first inner step (after the
    trainer started serving them): a checker's calls are answered "no such method". Rides as
    ``inner`` says."""

    def __init__(self, inner: Callable[[int], bool], host: Host) -> None:
        self.inner = inner
        self.host = host
        self._done = False

    def __call__(self, epoch: int) -> bool:
        if not self._done:
            self._done = True
            for name in (ROUND_RECEIPT.name, ROUND_BATCH.name, ROUND_WORK.name):
                self.host.router.remove(name)
        return self.inner(epoch)


class Copier:
    """From epoch ``from_epoch`` on, replaces the pseudo-gradient it sends with the model's last
    public move: the anchor's step since the last round it sent, over the outer learning rate
    (what every member received; zeros before it saw one move). Before that epoch, ``honest``
    (the gradient attack it was given) applies. Called on the training thread, as the
    optimizer's ``tamper``, under the optimizer's lock: the anchor holds still."""

    def __init__(self, optimizer: Ridable, honest: GradientAttack, from_epoch: int = 0) -> None:
        self.optimizer = optimizer
        self.honest = honest
        self.from_epoch = from_epoch
        self._last: list[np.ndarray] | None = None
        self.copied = 0
        """Rounds it sent a copy in (the tests check that it really ran)."""

    def __call__(self, delta: list[torch.Tensor]) -> None:
        d = self.optimizer.diloco
        anchor = [a.copy() for a in d.anchor]
        last, self._last = self._last, anchor
        if self.optimizer.epoch < self.from_epoch:
            self.honest(delta)
            return
        self.copied += 1
        scale = 1.0 / float(d.outer.lr)
        with torch.no_grad():
            for i, out in enumerate(delta):
                if last is None:
                    out.zero_()
                else:
                    move = torch.from_numpy(last[i] - anchor[i]).reshape(out.shape)
                    out.copy_(move.mul_(scale))


class Refuser:
    """Takes back the receipts its ledger serves as soon as the ledger starts serving them: the
    backbone's checks are answered "no such method". Records through ``inner``."""

    def __init__(self, inner: Forgery, host: Host) -> None:
        self.inner = inner
        self.host = host

    def __call__(self, ledger: WorkLedger) -> Recorder:
        ledger.stop_serving(self.host)
        return self.inner(ledger)


class Hider:
    """Answers "busy" to the backbone's checks of its epochs from ``from_epoch`` on, as a member
    that drops those calls would time out, and serves the others' receipts honestly: it passes
    the checks of its honest epochs, and hides from those of the epochs it faked. Records
    through ``inner``."""

    def __init__(self, inner: Forgery, host: Host, from_epoch: int) -> None:
        self.inner = inner
        self.host = host
        self.from_epoch = from_epoch

    def __call__(self, ledger: WorkLedger) -> Recorder:
        serving = self.host.router.get(WORK_RECEIPTS.name)
        if serving is not None and serving.unary is not None:
            answer = serving.unary

            async def hiding(ctx: CallContext, raw: Any) -> Any:
                if ReceiptsRequest.from_wire(raw).epoch >= self.from_epoch:
                    raise UnavailableError("busy")
                return await answer(ctx, raw)

            self.host.router.remove(WORK_RECEIPTS.name)
            self.host.router.add_raw(WORK_RECEIPTS.name, hiding)
        return self.inner(ledger)


class FreeRider:
    """Claims microbatches it never computed. Of the microbatches it counts, it computes the share
    ``computes`` (spread evenly); for the others it fetched the batch but sends no gradient, and
    its receipt copies the last real one's fingerprint (zeros before any) with the batch's loss:
    the cheapest receipt that looks like work, and a loss as good as the real one."""

    def __init__(self, computes: float, from_epoch: int = 0) -> None:
        self.computes = computes
        self.from_epoch = from_epoch
        """Before this epoch (of the parameters it computes at) it computes everything."""
        self.forged = 0
        """Receipts it forged (the tests check that it really ran)."""

    def __call__(self, ledger: WorkLedger) -> Recorder:
        counted = 0
        last: WorkReceipt | None = None

        def record(batch: Any, loss: float) -> None:
            nonlocal counted, last
            if ledger.params_epoch() < self.from_epoch:
                real = True
            else:
                real = computed(counted, self.computes)
                counted += 1
            if real:
                ledger.record(batch, loss)
                last = ledger.last()
                return
            for p in ledger.parameters:
                p.grad = None  # nothing computed: nothing to accumulate
            host = {name: t.detach().to("cpu") for name, t in batch_tensors(batch).items()}
            samples = int(next(iter(host.values())).shape[0])
            fingerprint = last.fingerprint if last is not None else bytes(FINGERPRINT_BYTES)
            # the parameters it holds, as the honest receipts say them: a check judges the forgery
            receipt = WorkReceipt(samples, batch_digest(host), float(loss), fingerprint,
                                  ledger.params_epoch(), ledger.parameters_now())  # fmt: skip
            ledger.file(receipt, host)
            self.forged += 1

        return record


class GradientAttack:
    """Applied in place to a peer's mean gradient (CPU float32 tensors) before it is averaged.

    Called on the training thread, once per round this peer joins; the noise of each call is
    drawn from its own generator, so the same run tampers alike every time."""

    def __init__(self, misbehaviour: Misbehaviour) -> None:
        self.attack = misbehaviour.attack
        self.factor = misbehaviour.factor
        self._generator = torch.Generator().manual_seed(misbehaviour.seed)
        self.rounds = 0
        """How many times it tampered (the tests check that it really ran)."""

    def __call__(self, gradients: list[torch.Tensor]) -> None:
        self.rounds += 1
        with torch.no_grad():
            for g in gradients:
                self._tamper(g)

    def _tamper(self, g: torch.Tensor) -> None:
        if self.attack is Attack.NAN:
            g.fill_(math.nan)
        elif self.attack is Attack.NOISE:
            rms = float(g.float().pow(2).mean().sqrt()) if g.numel() else 0.0
            noise = torch.randn(g.shape, generator=self._generator, dtype=torch.float32)
            # an all-zero gradient still gets garbage: the attack does not depend on the data
            g.copy_(noise.mul_(self.factor * (rms or 1e-3)))
        else:  # SCALE, SIGN_FLIP
            g.mul_(self.factor)


class LyingReducer:
    """A round's honest reducer whose results come out shifted: every element of every chunk it
    averages gets ``shift`` times the chunk's RMS added, in what it sends to every receiver and in
    what it keeps for itself (the replicas stay equal; the model moves where the liar wants).

    Everything but ``result`` is the honest reducer's: the inputs, the screening, the exclusions
    and the findings are real, so only the lie itself differs from an honest round."""

    def __init__(self, honest: PartReducer, shift: float) -> None:
        self.honest = honest
        self.shift = shift
        self.lies = 0
        """Chunks returned shifted."""

    def __getattr__(self, name: str) -> Any:
        # only reached for what this class does not define: the honest reducer's own
        return getattr(self.honest, name)

    async def result(self, index: int) -> ChunkResult:
        outcome = await self.honest.result(index)
        if outcome.weight <= 0 or outcome.values is None:
            return outcome  # nothing averaged: nothing to lie about
        codec = self.honest.spans[index].codec
        values = shifted(outcome.values, self.shift)
        data = encode(codec, values)
        if codec is not NONE:
            values = decode(codec, data, values.size)  # what the receivers will decode
        self.lies += 1
        return dataclasses.replace(outcome, data=bytes(data), values=values)


def shifted(values: F32, shift: float) -> F32:
    """A copy of ``values`` with ``shift`` times their RMS added to every element (at least a
    small absolute shift, so that an all-zero chunk is lied about too)."""
    rms = float(np.sqrt(np.mean(np.square(values, dtype=np.float64)))) if values.size else 0.0
    out = values.astype(np.float32, copy=True)
    out += np.float32(shift * (rms or 1e-3))
    return out


def forge_state(sharing: StateSharing) -> None:
    """From now on ``sharing`` serves its packed state with the first half of its float32 values
    +1 (diloco's anchor; the outer momentum is the second half), under the metadata of the honest
    state, anchor digest included."""

    def forging(honest: PackedProvider) -> PackedProvider:
        async def forged() -> PackedState:
            packed = await honest()
            values = packed.data.view(np.float32).copy()
            values[: values.size // 2] += 1.0
            return PackedState(
                packed.version, packed.metadata, packed.shapes, packed.dtypes, values.view(np.uint8)
            )

        return forged

    sharing.wrap_packed(forging)
