"""One Byzantine trainer among four: the defences keep the loss curve on the clean one, and without
them the same attack wrecks it.

The collaborations are real: four trainers with the collaborative optimizer and averager on
loopback, the task of ``benchmarks/robust/byzantine_task.py``, 30 epochs, two collaborations
at a time in one event loop, once for the module (``curves``); each test reads its scenario's curve.

"The clean run" is full-batch SGD over the four trainers' shards (``reference``): what an honest
collaboration computes, step for step, without the jitter of its timing. "Within 5 %" means that at
every epoch the defended run's held-out loss is within 5 % of it. Losing the Byzantine trainer's
shard alone moves the curve by about 0.3 % (``data_gap``, checked below), so the 5 % are the
defence's.

The lying reducer is caught by reducer verification in the round it lies in: every honest trainer
checks every part, and a part whose reducer it caught is replaced by the aggregate it recomputed
(or its own input), so the lie is never applied; the liar stays for the whole run, banned.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
import torch

from benchmarks.robust.byzantine_runs import Curve, Scenario, run_scenarios
from benchmarks.robust.byzantine_task import data_gap, reference, within
from core.averaging.round.reducer import PartReducer
from core.averaging.round.tensors import Span
from core.codecs import NONE
from core.swarm.byzantine import Attack, Misbehaviour, shifted
from core.util.errors import ConfigError
from tests.support.leaks import assert_no_leaks, open_fd_count

EPOCHS = 30
WITHIN = 0.05
GRADIENT_ATTACKS = [a for a in Attack if a.gradients]
SCENARIOS = [Scenario(a, defended) for a in Attack for defended in (True, False)]
CAUGHT_BY = {
    Attack.SCALE: {"norm_ratio"},
    Attack.SIGN_FLIP: {"norm_ratio", "clip_weight"},  # x10 sits at the screening limit
    Attack.NOISE: {"norm_ratio"},
    Attack.NAN: {"nonfinite"},
    Attack.LYING_REDUCER: {"reducer_mismatch"},
}
"""The statistics an honest trainer's findings name the Byzantine peer with (any of them)."""


@pytest.fixture(scope="module")
def curves() -> dict[str, Curve]:
    """Every scenario's curve: ten collaborations at once, everything they opened closed after."""

    async def run() -> dict[str, Curve]:
        baseline = open_fd_count()
        done = await run_scenarios(SCENARIOS, EPOCHS)
        await assert_no_leaks(baseline)
        return done

    return asyncio.run(run())


@pytest.fixture(scope="module")
def clean() -> list[float]:
    return reference(EPOCHS)


def curve_of(curves: dict[str, Curve], attack: Attack, defended: bool) -> Curve:
    return curves[Scenario(attack, defended).name]


# ---- the attacks themselves (no network) ---------------------------------------------------------


def test_each_gradient_attack_does_what_it_says() -> None:
    def tampered(attack: Attack) -> torch.Tensor:
        grads = [torch.full((4, 4), 0.5), torch.full((3,), -0.25)]
        Misbehaviour(attack, seed=1).gradient_attack()(grads)
        return torch.cat([g.flatten() for g in grads])

    honest = torch.cat([torch.full((16,), 0.5), torch.full((3,), -0.25)])
    torch.testing.assert_close(tampered(Attack.SCALE), honest * 1000)
    torch.testing.assert_close(tampered(Attack.SIGN_FLIP), honest * -10)
    assert tampered(Attack.NAN).isnan().all()
    noise = tampered(Attack.NOISE)
    assert noise[:16].pow(2).mean().sqrt() > 20 * 0.5  # ~100x the RMS: garbage, not the gradient
    torch.testing.assert_close(noise, tampered(Attack.NOISE))  # seeded: a run is reproducible


async def test_a_lying_reducer_shifts_what_it_returns_and_nothing_else() -> None:
    span = Span(0, 0, 4, NONE)
    honest = PartReducer([span], {0, 1}, 2, sender_timeout=5.0)
    liar = Misbehaviour(Attack.LYING_REDUCER).lie_in(_Round(honest))
    assert liar is not None
    honest.contribute(0, 0, np.array([1, 2, 3, 4], dtype=np.float32), 1.0)
    honest.contribute(1, 0, np.array([3, 2, 1, 0], dtype=np.float32), 1.0)
    truth = (await honest.result(0)).values
    lie = await liar.result(0)
    assert truth is not None
    assert lie.values is not None
    np.testing.assert_array_equal(truth, [2, 2, 2, 2])
    np.testing.assert_allclose(lie.values, truth + 20)  # 10 x the RMS (2) on every value
    assert bytes(lie.data) == lie.values.tobytes()  # what goes to the others is the same lie
    assert (lie.weight, lie.included) == (2.0, frozenset({0, 1}))  # the rest is the honest account
    assert liar.lies == 1
    assert liar.excluded == {}
    np.testing.assert_allclose(shifted(np.zeros(3, dtype=np.float32), 10.0), [0.01] * 3)


def test_attacks_are_named_and_misuse_is_refused() -> None:
    assert Attack.parse(" Sign-Flip ") is Attack.SIGN_FLIP
    with pytest.raises(ConfigError, match="scale, sign-flip, noise, nan, lying-reducer"):
        Attack.parse("bitflip")
    with pytest.raises(ConfigError, match="does not touch gradients"):
        Misbehaviour(Attack.LYING_REDUCER).gradient_attack()
    with pytest.raises(ConfigError, match="not a reducer's"):
        Misbehaviour(Attack.SCALE).lie_in(_Round(None))
    with pytest.raises(ConfigError, match="finite"):
        Misbehaviour(Attack.SCALE, strength=math.inf)
    with pytest.raises(ConfigError, match="starts at an epoch"):
        Misbehaviour(Attack.SCALE, computes=0.0, rides_from=-1)
    turncoat = Misbehaviour(Attack.SCALE, 1.0, computes=0.0, rides_from=5)
    assert turncoat.describe().endswith("computing 0% of the microbatches it counts from epoch 5")
    hider = Misbehaviour(Attack.SCALE, 1.0, computes=0.0, rides_from=5, hides=True)
    assert hider.describe().endswith("from epoch 5, hiding from the checks of the epochs it faked")
    assert Misbehaviour(Attack.LYING_REDUCER).lie_in(_Round(None)) is None  # reduces nothing


class _Round:
    """What ``Misbehaviour.lie_in`` needs of an ``AllReduce``: its reducer."""

    def __init__(self, reducer: PartReducer | None) -> None:
        self.reducer = reducer


# ---- four trainers, one of them Byzantine -------------------------------------------------------


def test_the_reference_is_what_a_perfect_defence_can_reach() -> None:
    # three shards of four train almost exactly like four: the 5 % are left to the defence
    assert data_gap(EPOCHS) < 0.01
    curve = reference(EPOCHS)
    assert curve[-1] < 0.05 * curve[0]  # and the model really trains


@pytest.mark.slow
@pytest.mark.parametrize("attack", GRADIENT_ATTACKS, ids=str)
def test_centered_clip_keeps_the_curve_within_5_percent_of_the_clean_run(
    curves: dict[str, Curve], clean: list[float], attack: Attack
) -> None:
    curve = curve_of(curves, attack, defended=True)
    assert curve.stopped is None
    assert len(curve.losses) == EPOCHS + 1
    # it misbehaved in every round it joined, and it joined rounds all along; how many depends on
    # the machine: on a loaded one the Byzantine trainer shares the loop with 39 other peers, misses
    # rounds and catches up by download (14 of 30 in one CI run; benchmarks/robust/byzantine_losses.py
    # reports the count)
    assert curve.attacks >= max(curve.rounds_with_byzantine) >= EPOCHS // 5, curve
    gap = within(curve.losses, clean)
    assert gap <= WITHIN, (gap, curve.losses, clean)
    # the honest trainers named it, for what it did
    assert curve.accused.get(curve.byzantine_peer, set()) & CAUGHT_BY[attack], curve.accused


@pytest.mark.slow
@pytest.mark.parametrize("attack", list(Attack), ids=str)
def test_the_plain_mean_lets_the_same_attack_wreck_the_run(
    curves: dict[str, Curve], clean: list[float], attack: Attack
) -> None:
    curve = curve_of(curves, attack, defended=False)
    # the loss left the clean curve: 1.5 times the clean run's or more, where the run stopped
    assert curve.stopped == "diverged", curve.losses
    last = len(curve.losses) - 1
    assert not curve.losses[-1] < 1.5 * clean[last], (curve.losses, clean[: last + 1])
    if attack is Attack.NAN:
        # a NaN aggregate is never applied (a step whose norm is not finite is skipped): the
        # model stopped moving, which is how this attack ruins a run
        assert curve.losses == [curve.losses[0]] * len(curve.losses)
    assert curve.byzantine_peer not in curve.accused  # nothing checked, nobody caught


@pytest.mark.slow
def test_a_lying_reducer_is_caught_at_its_first_lie_banned_and_does_no_harm(
    curves: dict[str, Curve], clean: list[float]
) -> None:
    curve = curve_of(curves, Attack.LYING_REDUCER, defended=True)
    assert curve.stopped is None
    assert len(curve.losses) == EPOCHS + 1
    assert curve.attacks >= 1  # it lied
    assert curve.accused.get(curve.byzantine_peer) == {"reducer_mismatch"}
    # every honest trainer that averaged with it checked its part, caught it and refuses it since
    # (it stays in the run to the end, asking to join every round)
    met = curve.rounds_with_byzantine
    assert all(rounds <= 1 for rounds in met), met
    assert curve.banned_by == sum(met) >= 1, (curve.banned_by, met)
    # the lie each of them caught was put right before its step: the curve is a clean one
    gap = within(curve.losses, clean)
    assert gap <= WITHIN, (gap, curve.losses, clean)
