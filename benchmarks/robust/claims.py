"""What a member's claims are worth: a trainer claiming 10x and 100x the samples it computed.

    python -m benchmarks.robust.claims --json out.json            # both modes (about 30 minutes)
    python -m benchmarks.robust.claims --only dedloc --json out.json
    python -m benchmarks.robust.claims --only checks --json out.json   # work checks (about 20 minutes)
    python -m benchmarks.robust.claims --only replays --json out.json  # diloco's replayed rounds

The weight a member attaches to what it sends is its own word: the plain weighted mean and
CenteredClip weigh by it, and its credit is what it says landed. One trainer of four flips its
update (x-3: within every screen's limit; x-10: at the norm screen's) and claims 10 or 100 times the
samples it computed. Both modes, with the defences a manifest gets by default (CenteredClip,
screening, claims bounded at ``averaging.weight_ratio_limit`` = 4 times the median claim):

- ``dedloc``: four trainers of ``byzantine_runs`` (a regression MLP, 30 epochs, the real
  collaborative optimizer and averager on loopback), against full-batch SGD over the four shards
  (``reference``: what an honest collaboration computes step for step). One control: the same
  100x claim with a x-3 flip under the plain mean that takes claims as made (the attack is real).
- ``diloco``: four trainers and a backbone of ``swarm_scale`` (worker process, rounds on the wall
  clock, 12 rounds), against a clean run at equal samples and at equal rounds. Credit there is
  what the backbone's contribution scores support (``core.training.credit.scores``), asked of
  every claim the attacker's records made; besides the flips, one member sends its honest update
  under a claim ten times its samples, and two free riders count microbatches they skip (one
  sends zeros, one computes a tenth). Also: what the scores credit of the honest members' claims
  (all of it), and the share of the run the backbone spent on the scores' sums.

``checks``: the backbone's spot checks of the trainers' work on the demo (``work_checks``): false
accusations in 1,000 honest checks, their cost, and what a free rider or an inflated claim is
credited.

``replays``: diloco with its rounds replayed (its defaults: overlap, ``work_checks``), on the demo:
every member's every round replayed in a swarm of four honest trainers (false accusations,
credit, what the replays cost), a member that sends its rounds with twice the samples it
computed, and (``groups``) six trainers in three groups, one of them a fresh identity claiming
twice its samples for three rounds and then gone: what each honest member and the fresh identity
are credited where the backbone replays only its own group's members; and (``mixed``) three
honest trainers of 12, 4 and 1 times the slowest's speed with every round replayed, beside the
same swarm with credit scored from the updates (``mixed_scored``: ``work_checks`` 0); and free
riders at the default rate beside three honest trainers (``half_steps``: half the inner steps it
counts, from its first round; ``copier``: trusted after its first replay, then nothing computed
and the model's last move sent as its work, until a replay catches it; ``round_refuser``: nothing
computed, its round receipts taken back).

``state``: a backbone and three diloco trainers land two rounds, then one trainer serves a forged
outer state (its anchor +1 everywhere, under the honest digest its metadata names) while newcomers
join: which state each loads, and whom the evidence names.

For each attacked run: the loss gap, the most its weight counted for in an honest reducer's part
over that part's lower median claim (``weight_ratio``: at most the bound), whom the honest
members' evidence accuses, and in diloco its credit over what it computed (``credit_ratio``; in
dedloc its records' claims over it, ``claimed_ratio``: those runs check no work, ``checks`` does).

Goals (the issue's): loss within 5 % of the clean run; weight at most the bound; credit at most
1.2x what it computed; a free rider credited at most 10 % of its claim and accused; the honest
members' credit exact; scoring within 5 % of the backbone's time (it sends nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from benchmarks.kit.harness import emit
from benchmarks.robust import work_checks
from benchmarks.robust.byzantine_runs import (
    AVERAGING,
    WEIGHT_RATIO_LIMIT,
    Curve,
    Scenario,
    hosts,
    run_scenario,
    run_scenarios,
)
from benchmarks.robust.byzantine_task import reference, within
from benchmarks.swarm import swarm_scale
from core.averaging.robust import aggregation
from core.averaging.robust.aggregation import AggregationConfig, Method
from core.codecs import FP16
from core.swarm.byzantine import Attack, Misbehaviour, forge_state

CLAIMS = (10.0, 100.0)
STRENGTHS = (-3.0, -10.0)
WITHIN = 0.05
CREDIT_BOUND = 1.2


def attacks() -> list[tuple[float, float]]:
    return [(claim, strength) for claim in CLAIMS for strength in STRENGTHS]


CONTROL = (1.0, -3.0)
"""The weakest flip with an honest claim: what the claims above add to it, if anything."""


def label(claim: float, strength: float) -> str:
    return f"flip x{-strength:g}, claims x{claim:g}"


# ---- dedloc --------------------------------------------------------------------------------------


def dedloc_figures(curve: Curve, epochs: int) -> dict[str, Any]:
    gap = within(curve.losses, reference(epochs))
    return {
        "gap_to_reference": gap if math.isfinite(gap) else str(gap),
        "final_loss": curve.losses[-1] if curve.losses else None,
        "stopped": curve.stopped,
        "attacked_rounds": curve.attacks,
        "weight_ratio": curve.byzantine_weight_ratio,
        # what its records claimed: these runs check no work (the checks section credits)
        "claimed_ratio": curve.byzantine_credit_claimed / max(1, curve.byzantine_computed),
        "accused": {peer: sorted(stats) for peer, stats in curve.accused.items()},
        "honest_accused": sorted(curve.honest_accused),
        "seconds": round(curve.seconds, 1),
    }


async def dedloc(epochs: int) -> dict[str, Any]:
    scenarios = {
        label(c, s): Scenario(Attack.SIGN_FLIP, True, strength=s, claim=c)
        for c, s in [CONTROL, *attacks()]
    }
    print(f"dedloc: {len(scenarios)} attacked collaborations, {epochs} epochs", flush=True)
    curves = await run_scenarios(list(scenarios.values()), epochs)
    runs = {name: dedloc_figures(curves[s.name], epochs) for name, s in scenarios.items()}
    # the control: the plain mean (screened) taking the 100x claim at its word
    as_claimed = replace(AVERAGING, aggregation=AggregationConfig(method=Method.MEAN))
    control = Scenario(Attack.SIGN_FLIP, True, strength=-3.0, claim=100.0)
    async with hosts(None) as make:
        taken = await run_scenario(control, epochs, make, config=as_claimed)
    return {
        "epochs": epochs,
        "runs": runs,
        "control_mean_as_claimed": dedloc_figures(taken, epochs),
        "goals": goals(
            {k: v for k, v in runs.items() if k != label(*CONTROL)}, gap_key="gap_to_reference"
        ),
    }


# ---- diloco --------------------------------------------------------------------------------------


def honest_credit(swarm: swarm_scale.Swarm) -> dict[str, Any]:
    """What the contribution scores credit of the honest members' claims: all of it, or the
    rule costs volunteers."""
    honest = [m for m in swarm.members if m["honest"]]
    claimed = sum(s for m in honest for _, s in m["claims"])
    credited = sum(swarm_scale.scored_credit(swarm, m) for m in honest)
    standings = {m["name"]: swarm.scores.standing(m["peer"]) for m in honest}
    return {"claimed": claimed, "credited": credited, "standings": standings}


def diloco_figures(clean: swarm_scale.Swarm, hard: swarm_scale.Swarm) -> dict[str, Any]:
    attacker = next(m for m in hard.members if not m["honest"])
    ratios = [m["weight_ratios"].get(attacker["peer"], 0.0) for m in hard.members if m["honest"]]
    loss = swarm_scale.compare(clean, hard)
    credited = swarm_scale.scored_credit(hard, attacker)
    return {
        "loss": loss,
        "worse_at_equal_samples": max(r["gap"] for r in loss["at_equal_samples"]),
        "worse_at_equal_rounds": max((r["gap"] for r in loss["at_equal_rounds"]), default=0.0),
        "curve": hard.curve,
        "weight_ratio": max(ratios, default=0.0),
        "credit_ratio": credited / max(1, attacker["computed"]),
        "computed": attacker["computed"],
        "credit_claimed": attacker["credit_claimed"],
        "credited": credited,
        "standing": hard.scores.standing(attacker["peer"]),
        "scores_accused": attacker["peer"] in hard.scores.accusations()
        or hard.scores.of(attacker["peer"]).accused,
        "honest_credit": honest_credit(hard),
        "accused": hard.accused,
        "findings": hard.findings,
        # what honest members accused honest members of (an attacker's evidence proves nothing)
        "honest_accused": sorted(
            {a for r, a, _ in hard.reports if r != attacker["peer"]} - {attacker["peer"]}
        ),
        "accused_by_the_attacker": sorted({a for r, a, _ in hard.reports if r == attacker["peer"]}),
    }


FREE_RIDERS = {
    "computes nothing": Misbehaviour(Attack.SCALE, 0.0, computes=0.0),
    "computes a tenth": Misbehaviour(Attack.SCALE, 1.0, computes=0.1),
}
"""Diloco free riders: counting microbatches they skip (the inner step moves nothing for them),
one sending zeros, one the update of the tenth it computed."""
INFLATED = Misbehaviour(Attack.SCALE, 1.0, claim=10.0)
"""An honest update under a claim ten times its samples: nothing for the screens to see."""
INFLATED_NAME = "honest update, claims x10"


@contextlib.contextmanager
def timed_scoring() -> Iterator[list[float]]:
    """Seconds this process's reducers spend on the leave-one-out sums (the backbone's: the
    trainers run in worker processes), over the ``with``."""
    spent = [0.0]
    original = aggregation.leave_one_out

    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - began

    aggregation.leave_one_out = timed  # type: ignore[assignment]
    try:
        yield spent
    finally:
        aggregation.leave_one_out = original


async def diloco_run(rounds: int, attack: Misbehaviour | None) -> tuple[swarm_scale.Swarm, float]:
    """A run of four trainers, the last one ``attack``; and the share of the run's time the
    backbone spent scoring."""
    speeds = [swarm_scale.microbatch_range(swarm_scale.ROUND_SECONDS)[0]]
    began = time.monotonic()
    with timed_scoring() as spent:
        swarm = await swarm_scale.run_swarm(4, FP16, rounds, speeds=speeds, attack=attack,
                                            processes=1)  # fmt: skip
    return swarm, spent[0] / (time.monotonic() - began)


async def diloco(rounds: int) -> dict[str, Any]:
    print(f"diloco: 4 trainers, {rounds} rounds, clean", flush=True)
    clean, clean_share = await diloco_run(rounds, None)
    runs: dict[str, Any] = {}
    attacked = {
        label(claim, strength): Misbehaviour(Attack.SIGN_FLIP, strength, claim=claim)
        for claim, strength in [CONTROL, *attacks()]
    }
    shares = [clean_share]
    for name, attack in [*attacked.items(), (INFLATED_NAME, INFLATED)]:
        print(f"diloco: one trainer of four, {name}", flush=True)
        hard, share = await diloco_run(rounds, attack)
        runs[name] = diloco_figures(clean, hard) | {"scoring_share": share}
        shares.append(share)
    riders: dict[str, Any] = {}
    for name, attack in FREE_RIDERS.items():
        print(f"diloco: one trainer of four {name}", flush=True)
        hard, share = await diloco_run(rounds, attack)
        figures = diloco_figures(clean, hard)
        claimed = figures["credit_claimed"]
        riders[name] = figures | {"credited_share": figures["credited"] / max(1, claimed)}
        shares.append(share)
    result = {
        "rounds": rounds,
        "clean_curve": clean.curve,
        "clean_accused": clean.accused,
        "clean_honest_credit": honest_credit(clean),
        "runs": runs,
        "free_riders": riders,
        "scoring_share_of_backbone_time": max(shares),
    }
    return result | {"goals": diloco_goals(result)}


def diloco_goals(result: dict[str, Any]) -> dict[str, bool]:
    """The issue's goals over a diloco result. The loss goal is the flips' (the honest update
    under a claim of x10 counts its claimed samples on the curve, so its gap at equal samples
    says nothing about the model; its gap at equal rounds is in its figures)."""
    runs, riders = result["runs"], result["free_riders"]
    liars = {k: v for k, v in runs.items() if k != label(*CONTROL)}
    flips = {k: v for k, v in liars.items() if k != INFLATED_NAME}
    honest = [result["clean_honest_credit"]]
    honest += [r["honest_credit"] for r in [*runs.values(), *riders.values()]]
    return goals(flips, gap_key=None) | {
        "credit_at_most_1_2x": all(r["credit_ratio"] <= CREDIT_BOUND for r in liars.values()),
        "weight_at_most_the_bound": all(
            r["weight_ratio"] <= WEIGHT_RATIO_LIMIT for r in liars.values()
        ),
        "free_rider_credited_at_most_10_percent": all(
            r["credited_share"] <= 0.1 for r in riders.values()
        ),
        "liars_accused_by_scores": all(
            r["scores_accused"] for r in [*riders.values(), *liars.values()]
        ),
        "honest_credit_exact": all(h["credited"] == h["claimed"] for h in honest),
        "nobody_honest_accused": all(
            not r["honest_accused"] for r in [*runs.values(), *riders.values()]
        ),
        "scoring_within_5_percent_of_backbone_time": result["scoring_share_of_backbone_time"]
        <= 0.05,
    }


# ---- a donor serving a tampered state -------------------------------------------------------------


async def tampered_state(newcomers: int) -> dict[str, Any]:
    """A backbone and three trainers land two rounds; one trainer then serves a forged state, and
    ``newcomers`` trainers join one after another: which state each loads, and whom the evidence
    accuses. Also what the block digests add to a state's bytes."""
    print(f"state: a forging donor, {newcomers} newcomers", flush=True)
    codec, seconds = FP16, swarm_scale.ROUND_SECONDS
    backbone = await swarm_scale.start_member("backbone", codec, None, aux=True)
    members = [await swarm_scale.start_member(f"t{i}", codec, backbone.address) for i in range(3)]
    loops = [asyncio.create_task(swarm_scale.train(m, i)) for i, m in enumerate(members)]
    joined: list[swarm_scale.Member] = []
    loaded: list[dict[str, Any]] = []
    try:
        for _ in range(int(4 * seconds / 0.5)):  # two rounds land within about three
            if backbone.optimizer.epoch >= 2:
                break
            await asyncio.sleep(0.5)
        forger = members[0]
        forge_state(forger.optimizer.links.sharing)
        for i in range(newcomers):
            newcomer = await swarm_scale.start_member(f"n{i}", codec, backbone.address)
            joined.append(newcomer)
            honest = {
                m.optimizer.epoch: m.optimizer.diloco.digest for m in [backbone, *members[1:]]
            }
            mine = newcomer.optimizer
            loaded.append(
                {
                    "epoch": mine.epoch,
                    "honest_state": honest.get(mine.epoch) == mine.diloco.digest,
                    "waiting_for": mine.waiting_for,
                }
            )
        await asyncio.sleep(2.0)  # the evidence is published in the background
        found = await backbone.optimizer.evidence.fetch()
        header = await forger.optimizer.links.sharing.served_header()
    finally:
        for loop in loops:
            loop.cancel()
        for member in [*joined, *members, backbone]:
            await swarm_scale.stop(member, cleanly=True)
    accused = sorted({str(item.evidence.accused) for item in found})
    forger_id = str(forger.host.peer_id)
    return {
        "round_seconds": seconds,
        "newcomers": loaded,
        "newcomers_on_the_honest_state": sum(item["honest_state"] for item in loaded),
        "accused": accused,
        "statistics": sorted({item.evidence.statistic for item in found}),
        "forger_accused_alone": accused == [forger_id],
        "state_bytes": header.total_bytes,
        "digest_bytes": len(header.blocks) * 32,
        "goals": {
            "no_newcomer_loads_it": all(item["honest_state"] for item in loaded),
            "donor_accused": accused == [forger_id],
        },
    }


# ---- both ----------------------------------------------------------------------------------------


def goals(runs: dict[str, Any], gap_key: str | None) -> dict[str, bool]:
    """``gap_key``: the run's two-sided gap to its reference (dedloc); None: diloco's harm, a loss
    above the clean run's at equal samples and at equal rounds."""

    def within_goal(run: dict[str, Any]) -> bool:
        if gap_key is not None:
            gap = run[gap_key]
            return isinstance(gap, float) and gap <= WITHIN
        worse = float(max(run["worse_at_equal_samples"], run["worse_at_equal_rounds"]))
        return worse <= WITHIN

    found = {
        "loss_within_5_percent": all(within_goal(r) for r in runs.values()),
        "weight_at_most_the_bound": all(
            r["weight_ratio"] <= WEIGHT_RATIO_LIMIT for r in runs.values()
        ),
        "nobody_honest_accused": all(not r["honest_accused"] for r in runs.values()),
    }
    if gap_key is None:  # dedloc's credit is the work checks' (``checks``)
        found["credit_at_most_1_2x"] = all(r["credit_ratio"] <= CREDIT_BOUND for r in runs.values())
    return found


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    result: dict[str, Any] = {"benchmark": "claims", "weight_ratio_limit": WEIGHT_RATIO_LIMIT}
    if args.only in (None, "dedloc"):
        result["dedloc"] = await dedloc(args.epochs)
    if args.only in (None, "diloco"):
        result["diloco"] = await diloco(args.rounds)
    if args.only in (None, "state"):
        result["state"] = await tampered_state(args.newcomers)
    if args.only in (None, "checks"):
        only = set(args.liars.split(",")) if args.liars else None
        result["checks"] = await work_checks.checks(
            args.honest_checks, args.check_epochs, args.liar_epochs, only, args.start_from
        )
    if args.only in (None, "replays"):
        runs = set(args.replays.split(",")) if args.replays else None
        result["replays"] = await work_checks.diloco_checks(
            args.replay_rounds, runs, args.start_from
        )
    result["seconds"] = round(time.monotonic() - started)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=("dedloc", "diloco", "state", "checks", "replays"))
    parser.add_argument("--honest-checks", type=int, default=1000)
    parser.add_argument("--check-epochs", type=int, default=100)
    parser.add_argument("--liar-epochs", type=int, default=20)
    parser.add_argument(
        "--liars",
        help="with --only checks: these liars' runs alone, comma-separated (no honest runs): "
        + ", ".join(work_checks.liars()),
    )
    parser.add_argument("--newcomers", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument(
        "--replay-rounds", type=int, default=10, help="with --only replays: rounds of each run"
    )
    parser.add_argument(
        "--replays",
        help="with --only replays: these runs alone, comma-separated: "
        + ", ".join(work_checks.REPLAY_RUNS),
    )
    parser.add_argument(
        "--from",
        dest="start_from",
        type=Path,
        help="with --only checks or replays: a checkpoint every peer starts from (a model at "
        "rest: the README's run keeps its own in ~/.cache/barnraise/swarm/barnraise-demo/"
        "backbone/checkpoints)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.start_from is not None and not args.start_from.is_file():
        parser.error(f"no checkpoint at {args.start_from}")
    if args.liars and (unknown := set(args.liars.split(",")) - set(work_checks.liars())):
        parser.error(f"no such liar: {', '.join(sorted(unknown))}")
    if args.replays and (unknown := set(args.replays.split(",")) - set(work_checks.REPLAY_RUNS)):
        parser.error(f"no such run: {', '.join(sorted(unknown))}")
    torch.set_num_threads(1)
    emit(asyncio.run(main_async(args)), args.json)


if __name__ == "__main__":
    main()
