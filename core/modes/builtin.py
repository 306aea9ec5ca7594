"""The shipped training modes, ``dedloc`` and ``diloco``, and ``MODES``, the table of them.

Their training code is ``core.training.dedloc`` and ``core.training.diloco``; what is here is what
the layers below training need of them: the manifest's rules, the network estimate, the page's
sentence and the dashboard's line.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from core.modes.spec import (
    AveragingKnobs,
    ModeSpec,
    Problem,
    Traffic,
    TrafficInputs,
    TrainingKnobs,
)
from core.modes.table import ModeTable
from core.util.amounts import exact_length, rough_duration, size_text


def _no_problems(training: TrainingKnobs, averaging: AveragingKnobs) -> Iterator[Problem]:
    return iter(())


def _dedloc_traffic(inputs: TrafficInputs) -> Traffic:
    """Each epoch one all-reduce of the gradients (each member sends about the model twice and
    receives as much), and every ``average_state_every`` epochs one of the state; an epoch lasts
    the target batch over the assumed swarm's speed, never less than a matchmaking and a round."""
    t, a = inputs.training, inputs.averaging
    value_bytes = 4 * inputs.codec.bytes_per_value
    gradients = value_bytes * inputs.parameters
    states = value_bytes * inputs.state_values / t.average_state_every
    epoch_seconds = max(
        t.target_batch_size / (inputs.peers * inputs.samples_per_second),
        a.matchmaking_time + inputs.min_round_seconds,
    )
    per_hour = (gradients + states) * 3600.0 / epoch_seconds
    return Traffic(
        per_hour,
        f"network: about {size_text(per_hour)} an hour while contributing, averaging with the "
        f"other peers (one all-reduce every {rough_duration(epoch_seconds)}, assuming "
        f"{inputs.peers} computers like this one; more peers, more rounds)",
    )


def _dedloc_describe(training: TrainingKnobs) -> str:
    return f", {training.target_batch_size:,} samples a step (DeDLOC, the dedloc mode)"


def _dedloc_epoch(training: TrainingKnobs) -> str:
    return (
        "one optimizer step over a collaborative batch of at least "
        f"{training.target_batch_size:,} samples"
    )


DEDLOC = ModeSpec(
    "dedloc",
    summary="every target batch, the whole gradient is averaged and every peer takes the same "
    "step (DeDLOC)",
    for_people="This project trains as one large batch: every computer adds what it computed, "
    "and each time the volunteers together reach the target batch they all take the same step",
    implementation="core.training.dedloc.mode",
    check=_no_problems,
    traffic=_dedloc_traffic,
    describe=_dedloc_describe,
    epoch=_dedloc_epoch,
    follows_rollbacks=True,
    misbehaving_demo=True,
    checks_work=lambda training: training.work_checks > 0,
)


RESIDUAL_DECAY = 0.95
"""diloco's default ``residual_decay`` (SparseLoCo's): what a sparse codec's residual keeps a round."""
WORK_CHECKS = 0.1
"""dedloc's default ``work_checks``: the share of a trainer's epochs spot-checked at random."""


def _diloco_check(training: TrainingKnobs, averaging: AveragingKnobs) -> Iterator[Problem]:
    if training.delay_parameter_updates:
        reason = (
            "applies to dedloc mode only; in diloco mode the exchange overlaps the next round "
            "with training.overlap"
        )
        yield "training.delay_parameter_updates", reason
    if averaging.sparse and training.outer_momentum != 0:
        # measured (benchmarks/learning/lowcomm.py, 8 rounds): held-out loss 2.75 with momentum 0.9,
        # 1.13 without, 1.08 for exact diloco with it
        reason = (
            f"must be 0 with averaging.codec {averaging.codec!r}: the error-feedback residual "
            "already carries what momentum would (SparseLoCo), and both together overshoot"
        )
        yield "training.outer_momentum", reason
    if not averaging.sparse and training.residual_decay != RESIDUAL_DECAY:
        reason = (
            f"applies with a sparse codec only (topk), not averaging.codec {averaging.codec!r}: "
            "an exact codec's residual holds only work that has not landed yet, never decayed"
        )
        yield "training.residual_decay", reason


def _diloco_replays(training: TrainingKnobs) -> bool:
    """diloco replays trainers' rounds (each starts at the anchor, with or without overlap)."""
    return training.work_checks > 0


def _diloco_traffic(inputs: TrafficInputs) -> Traffic:
    """One exchange a round, whatever the device: in a group of n a member sends (n-1)/n of the
    model to the other reducers, and its part's mean back to them in the codec that carries a
    mean of n (``for_sum``: denser for a sparse codec); it receives as much."""
    t, a = inputs.training, inputs.averaging
    group = min(a.target_group_size, inputs.peers)
    codec = inputs.codec
    back = codec.for_sum(group)
    sent = inputs.parameters * (group - 1) / group * (codec.bytes_per_value + back.bytes_per_value)
    per_hour = 2 * sent * 3600.0 / t.round_seconds
    return Traffic(
        per_hour,
        f"network: about {size_text(per_hour)} an hour while contributing: one exchange of what "
        f"the model learned every {rough_duration(t.round_seconds)} (a round), however fast this "
        f"computer is (assuming groups of {group})",
    )


def _diloco_epoch(training: TrainingKnobs) -> str:
    return (
        f"one round of {training.round_seconds:g} seconds in which every peer takes its own "
        "steps, then their updates are averaged (DiLoCo)"
    )


def _diloco_describe(training: TrainingKnobs) -> str:
    return (
        f" in rounds of {exact_length(training.round_seconds)}: each computer trains on its own, "
        "and once a round they exchange what their models learned (DiLoCo, the diloco mode)"
    )


def diloco_inner_lr(training: TrainingKnobs) -> float:
    """An inner step takes one microbatch, where ``lr`` was chosen for steps of the whole
    ``target_batch_size``: scaled down by the square root of the batch ratio, the rule for
    adaptive optimizers (Malladi et al. 2022), unless ``inner_lr`` is given. At the full rate,
    steps of a few samples each wander in their own noise: on the demo the held-out loss stayed
    at the unigram floor (``benchmarks/learning/diloco_sweep.py``)."""
    if training.inner_lr > 0:
        return training.inner_lr
    return training.lr * math.sqrt(training.microbatch_size / training.target_batch_size)


DILOCO = ModeSpec(
    "diloco",
    summary="each peer takes inner steps alone for a round, then the peers average what moved "
    "and take one outer step (DiLoCo): far fewer, smaller exchanges",
    for_people="This project trains in rounds: each computer trains on its own, and at the end "
    "of every round the computers exchange what their models learned (the round ends at the "
    "same moment everywhere)",
    implementation="core.training.diloco.mode",
    check=_diloco_check,
    traffic=_diloco_traffic,
    describe=_diloco_describe,
    epoch=_diloco_epoch,
    learning_rate=diloco_inner_lr,
    clock_rounds=True,
    misbehaving_demo=True,
    checks_work=_diloco_replays,
)

MODES = ModeTable((DEDLOC, DILOCO))
"""The built-in table; its first row is the mode of a manifest that names none."""
