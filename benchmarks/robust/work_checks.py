"""Checked work on the demo: what the backbone's spot checks cost, how close honest peers come to
failing them, and what a peer lying about its work is credited.

    python -m benchmarks.robust.claims --only checks --json out.json

Each run is the demo project in one process: its real model, tokenizer and shards (served on
loopback), a backbone and four trainers (``ProjectPeer``), dedloc with the default defences. Runs:

- ``honest_every_epoch``: every trainer's every epoch checked (``work_checks`` = 1, no budget),
  until the honest checks number ``--honest-checks``: how many falsely fail (the goal: none), and
  the closest an honest microbatch came to the tolerance (``margin``, 1 fails).
- ``default_rate``: the manifest's default (``work_checks`` = 0.1, the 5 % budget): the backbone's
  time spent recomputing over its run's time, and the bytes the checks took from each trainer over
  all the bytes it sent (the goals: 5 % and 2 %), and whether honest credit is exact.
- ``free_rider`` (computes nothing), ``free_rider_10`` (computes a tenth of what it counts),
  ``claims_10x`` and ``claims_100x``: one trainer of four lies, at the default rate; its credit
  over its claim and over what it computed, whether it was accused, and with what.
- ``refuser``: computes nothing and serves no receipts (the checks are answered "no such
  method"): a refusal fails the check, so it is credited nothing and accused ``work_refused``.
- ``turncoat``: honest until epoch ``TURNS_AT`` (its first check passes, so it is trusted and
  checked at random), then computes nothing: what it was credited on trust since its last passed
  check is withdrawn when a check catches it (``credited`` is net of ``withdrawn``).
- ``hider``: the turncoat, answering "busy" to every check of an epoch it faked (as one that
  drops the calls would time out): the check stays open, is made again, and expires withdrawing
  what trust paid it; it is accused of nothing (an unreachable honest member looks the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.data import ShardServer
from core.project import load_manifest
from core.swarm.byzantine import Attack, Misbehaviour
from core.swarm.demo_data import DEMO_MANIFEST, prepare_demo_data
from core.training.checkpoints import CheckpointStore
from core.training.credit.metrics import EpochMetrics
from core.training.diloco.checks.receipts import ReplayedSketch, ReplayRequest, work_block_bytes
from core.training.diloco.checks.replayer import RoundReplayer
from core.training.diloco.checks.sketch import sketch
from core.training.peer.project_peer import PeerSettings, ProjectPeer
from core.training.peer.roles import CHECKS_LOG
from core.trust.evidence import Evidence
from core.worker.events import PeerEpoch, PeerEvent, PeerReady

TRAINERS = 4
TARGET = 128
"""The demo's target batch halved: twice the epochs (and checks) in the same time."""
SETTLE = 20.0
"""Seconds after the trainers stop for the last checks and credit to come in."""
TURNS_AT = 5
"""The epoch from which the turncoat computes nothing."""
TURNCOAT_EPOCHS = 150
"""Epochs at most the turncoat's run lasts (it stops when a check catches it): at the default
rate, within the checks' 5 % budget, a trusted trainer of this demo may go 80 epochs unchecked."""
FREE_RIDER_BOUND = 0.10
CREDIT_BOUND = 1.2
HONEST_BOUND = 0.9
COMPUTE_BUDGET = 0.05
BYTES_BUDGET = 0.02


def liars() -> dict[str, Misbehaviour]:
    honest_gradients = (Attack.SCALE, 1.0)  # its gradients as computed: only its claims lie
    return {
        "free_rider": Misbehaviour(*honest_gradients, computes=0.0),
        "free_rider_10": Misbehaviour(*honest_gradients, computes=0.1),
        "claims_10x": Misbehaviour(*honest_gradients, claim=10.0),
        "claims_100x": Misbehaviour(*honest_gradients, claim=100.0),
        # honest until the checks trust it, then nothing: what it was credited on trust is
        # withdrawn when a random check catches it
        "turncoat": Misbehaviour(*honest_gradients, computes=0.0, rides_from=TURNS_AT),
        # computes nothing and answers the checks "no such method"
        "refuser": Misbehaviour(*honest_gradients, computes=0.0, refuses=True),
        # the turncoat, hiding from the checks of the epochs it faked
        "hider": Misbehaviour(*honest_gradients, computes=0.0, rides_from=TURNS_AT, hides=True),
    }


async def run_swarm(
    data: Path,
    work: Path,
    *,
    epochs: int,
    rate: float,
    liar: Misbehaviour | None = None,
    stop_when: Callable[[list[dict[str, Any]]], bool] | None = None,
    minutes: float = 30.0,
    training: dict[str, Any] | None = None,
    averaging: dict[str, Any] | None = None,
    trainers: int = TRAINERS,
    liar_leaves_at: int | None = None,
    duties: Sequence[float] = (),
    start_from: Path | None = None,
    colluders: int = 0,
) -> dict[str, Any]:
    """One demo collaboration; what it credited, checked and sent (``training``, ``averaging``:
    more values of those sections, such as diloco's; the liar is the last of ``trainers``, and
    stops at ``liar_leaves_at`` where given: a fresh identity used for a few rounds; ``duties``:
    the share of the time each trainer computes, the volunteer's throttle, 1 where not given;
    ``start_from``: a checkpoint every peer starts from, the backbone too; ``colluders``: the
    trainers before the liar that train honestly and, asked to replay the liar's rounds, pass
    them: ``collude``)."""
    manifest = load_manifest(DEMO_MANIFEST).with_training(
        target_batch_size=TARGET, work_checks=rate, **(training or {})
    )
    if averaging:
        manifest = manifest.with_averaging(**averaging)
    liar_index = trainers - 1
    # the epochs count from the checkpoint's, a liar's first faked epoch too
    first = CheckpointStore.load(start_from).epoch if start_from is not None else 0
    liar = counted_from(liar, first)
    server = ShardServer(data)
    base = await server.start()
    reported: list[EpochMetrics] = []
    accused: list[Evidence] = []
    counted: dict[int, int] = defaultdict(int)  # trainer -> samples it counted
    computed: dict[int, int] = defaultdict(int)  # trainer -> samples it computed
    claimed: dict[int, int] = defaultdict(int)  # trainer -> samples its records claim
    claimed_in: dict[int, dict[int, int]] = defaultdict(dict)  # trainer -> epoch -> its claim
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def aux_event(event: PeerEvent) -> None:
        if isinstance(event, PeerReady) and not ready.done():
            ready.set_result(event.address)

    aux = ProjectPeer(
        PeerSettings(manifest, work_dir=work / "backbone", role="backbone", data_base=base,
                     on_metrics=reported.append, on_evidence=accused.extend,
                     start_from=start_from),
        aux_event,
    )  # fmt: skip
    started = time.monotonic()
    aux_stop = asyncio.Event()
    aux_task = asyncio.create_task(aux.run(aux_stop), name="bench/aux")
    peers: list[ProjectPeer] = []
    try:
        address = await _address(ready, aux_task)
        for index in range(trainers):
            lying = liar if index == liar_index else None

            def on_event(
                event: PeerEvent, index: int = index, lying: Misbehaviour | None = lying
            ) -> None:
                if isinstance(event, PeerEpoch):
                    counted[index] += event.samples
                    claim = lying.claim if lying is not None else 1.0
                    claimed[index] += round(event.samples * claim)
                    claimed_in[index][event.epoch] = round(event.samples * claim)
                    rides = lying is not None and event.epoch >= lying.rides_from
                    computes = lying.computes if rides and lying is not None else 1.0
                    computed[index] += round(event.samples * computes)

            peer = ProjectPeer(
                PeerSettings(manifest, work_dir=work / f"peer-{index}", data_base=base,
                             initial_peers=(address,), data_seed=index + 1,
                             until_epoch=first + (epochs if lying is None or liar_leaves_at is None
                                                  else liar_leaves_at),
                             misbehaviour=lying, start_from=start_from),
                on_event,
            )  # fmt: skip
            peer.control.set_duty((*duties, *[1.0] * trainers)[index])
            peers.append(peer)
        runs = [asyncio.create_task(p.run(asyncio.Event())) for p in peers]
        passes: Counter[int] = Counter()  # colluder -> its partner's rounds it passed
        runs += [
            asyncio.create_task(
                collude(peers[i], peers[liar_index], passes, i), name=f"bench/colluder-{i}"
            )
            for i in range(liar_index - colluders, liar_index)
        ]
        checks_log = work / "backbone" / CHECKS_LOG
        while not all(r.done() for r in runs):
            await asyncio.sleep(1.0)
            if stop_when is not None and stop_when(_lines(checks_log)):
                break
            if time.monotonic() - started > minutes * 60:
                break  # the run says how far it got
        for task in runs:
            task.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
        trained = time.monotonic() - started
        await asyncio.sleep(SETTLE)
        ids = [str(p.host.peer_id) for p in peers]
        sent = [int(p.progress()["bytes_sent"]) for p in peers]
        received = [int(p.host.traffic.received) for p in peers]
        # what each trainer sent and received replaying others' rounds for the backbone
        replayers = [getattr(p.optimizer, "replayer", None) for p in peers]
        replayed = [(r.sent, r.received) if r is not None else (0, 0) for r in replayers]
        computed_all = [int(p.progress()["samples"]) for p in peers]
    finally:
        for peer in peers:
            with contextlib.suppress(Exception):
                await peer.close()
        aux_stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(aux_task, 30)
        await aux.close()
        await server.close()
    checks = _lines(work / "backbone" / CHECKS_LOG)
    credited: dict[str, int] = defaultdict(int)  # net of what was withdrawn
    withdrawn: dict[str, int] = defaultdict(int)
    credited_in: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for metrics in reported:
        for part in metrics.contributions:
            samples = -part.samples if metrics.withdrawn else part.samples
            credited[part.peer] += samples
            credited_in[part.peer][metrics.epoch] += samples
            if metrics.withdrawn:
                withdrawn[part.peer] += part.samples
    settled = max((m.epoch for m in reported if not (m.late or m.withdrawn)), default=-1) - 1
    rows = []
    for index, peer in enumerate(ids):
        mine = [c for c in checks if c["peer"] == peer]
        differs = epochs_differing(claimed_in[index], credited_in[peer], settled)
        rows.append({
            "liar": liar is not None and index == liar_index,
            "colluder": liar_index - colluders <= index < liar_index,
            "passed_for_partner": passes[index],
            "counted": counted[index],
            "computed": computed[index],
            "claimed": claimed[index],
            "credited": credited.get(peer, 0),
            "settled_epochs_differing": differs,
            "unsettled_claimed": sum(v for e, v in claimed_in[index].items() if e > settled),
            "withdrawn": withdrawn.get(peer, 0),
            "checks": len(mine),
            "verdicts": sorted({c["verdict"] for c in mine}),
            # its replies to checks of its rounds, to the backbone and to trainers replaying them
            "check_bytes": sum(c["received"] for c in mine),
            "replay_bytes_sent": replayed[index][0],
            "replay_bytes_received": replayed[index][1],
            "bytes_sent": sent[index],
            "bytes_received": received[index],
            "trained": computed_all[index],
            "accused_with": sorted({e.statistic for e in accused if str(e.accused) == peer}),
        })  # fmt: skip
    index_of = {peer: index for index, peer in enumerate(ids)}
    findings = [
        {
            "accused": index_of.get(str(e.accused), -1),
            "reporter": index_of.get(str(e.reporter), -1),
            "round": e.round_key,
            "part": e.part,
            "chunk": e.chunk,
            "statistic": e.statistic,
            "value": e.value,
        }
        for e in accused
    ]
    return {
        "epochs": max((m.epoch for m in reported), default=-1) + 1 - first,
        "findings": findings,
        "seconds": round(trained, 1),
        "checks": checks,
        "trainers": rows,
        "recompute_seconds": round(sum(c["compute"] for c in checks), 3),
    }


async def collude(
    peer: ProjectPeer, partner: ProjectPeer, passes: Counter[int], index: int
) -> None:
    """Once ``peer`` replays for the backbone: asked to replay a round of ``partner``, it answers
    the sketch of the partner's own work (read from the partner's ledger: the two are one
    attacker) under the key asked for, so the partner's round passes unless the backbone audits
    it; any other member's round it replays honestly, to stay trusted."""
    while True:  # the replayer comes with the optimizer, once the peer has joined
        replayer: RoundReplayer | None = getattr(peer.optimizer, "replayer", None)
        if replayer is not None:
            break
        await asyncio.sleep(0.5)
    honest = replayer._replay

    async def replay(request: ReplayRequest) -> ReplayedSketch:
        kept = getattr(partner.optimizer, "rounds_kept", None)
        sealed = kept.sealed(request.receipt.epoch) if kept is not None else None
        if request.member != str(partner.host.peer_id) or sealed is None:
            return await honest(request)
        work = np.frombuffer(sealed.work, "<f4")
        per_block = work_block_bytes(work.size) // 4
        drawn = [work[i * per_block : (i + 1) * per_block] for i in request.blocks]
        passes[index] += 1
        return ReplayedSketch(sketch(np.concatenate(drawn), request.key).tobytes())

    replayer._replay = replay  # type: ignore[method-assign]  # the attacker's own code


def counted_from(liar: Misbehaviour | None, first: int) -> Misbehaviour | None:
    """``liar`` with the epoch it starts faking at counted from ``first`` (a checkpoint's)."""
    if liar is None or not liar.rides_from:
        return liar
    return dataclasses.replace(liar, rides_from=first + liar.rides_from)


async def _address(ready: asyncio.Future[str], backbone: asyncio.Task[None]) -> str:
    """The backbone's address once it is ready; its own error if it failed before."""
    await asyncio.wait((ready, backbone), timeout=120, return_when=asyncio.FIRST_COMPLETED)
    if backbone.done():
        backbone.result()  # the backbone's own error, not a wait that timed out
    if not ready.done():
        raise TimeoutError("the backbone was not ready within 120 s")
    return ready.result()


def epochs_differing(
    claimed: dict[int, int], credited: dict[int, int], settled: int
) -> list[list[int]]:
    """[epoch, claimed, credited] for each epoch up to ``settled`` whose credit is not its claim.

    The run stops its trainers at once, so what they claimed in the last epochs may still wait
    for the backbone's checks (longer where the backbone had fallen behind): only the epochs the
    backbone had reported a later one of are judged exact; the rest is ``unsettled_claimed``."""
    epochs = sorted(e for e in {*claimed, *credited} if e <= settled)
    return [
        [e, claimed.get(e, 0), credited.get(e, 0)]
        for e in epochs
        if claimed.get(e, 0) != credited.get(e, 0)
    ]


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def honest_summary(run: dict[str, Any]) -> dict[str, Any]:
    checks = run["checks"]
    passed = [c for c in checks if c["verdict"] == "passed"]
    return {
        "epochs": run["epochs"],
        "checks": len(checks),
        "microbatches_recomputed": sum(c["sampled"] for c in checks),
        "false_accusations": sum(1 for c in checks if c["verdict"] == "caught"),
        "unreached": sum(1 for c in checks if c["verdict"] == "unreached"),
        "apart": sum(1 for c in checks if c["verdict"] == "apart"),
        "worst_margin": max((c["margin"] for c in passed), default=None),
        "credit_exact": all(not t["settled_epochs_differing"] for t in run["trainers"]),
        "credit_differs": {
            i: t["settled_epochs_differing"][:10]
            for i, t in enumerate(run["trainers"])
            if t["settled_epochs_differing"]
        },
        "unsettled_claimed": [t["unsettled_claimed"] for t in run["trainers"]],
    }


def cost_summary(run: dict[str, Any]) -> dict[str, Any]:
    """What the checks of an honest run cost, and every accusation in it: a check that caught
    someone, and any signed evidence (a screen's finding that repeated, a reducer's lie), each
    against an honest peer."""
    trainers = run["trainers"]
    # what a trainer sends for the checks (its replies, the blocks it replays for the backbone)
    # over all it sends, and what it receives replaying (the members' batches) over all it
    # receives: the larger of the two for each trainer
    byte_shares = [
        max(
            (t["check_bytes"] + t.get("replay_bytes_sent", 0)) / t["bytes_sent"],
            t.get("replay_bytes_received", 0) / max(1, t.get("bytes_received", 0)),
        )
        for t in trainers
        if t["bytes_sent"]
    ]
    evidence = Counter(
        (f"trainer {f['accused']}" if f["accused"] >= 0 else "not a trainer", f["statistic"])
        for f in run["findings"]
    )
    return {
        "epochs": run["epochs"],
        "checks": len(run["checks"]),
        "recompute_share_of_backbone_time": run["recompute_seconds"] / run["seconds"],
        "check_bytes_share_of_trainer_bytes": max(byte_shares, default=0.0),
        # each trainer's: its rounds checked, its replies to those checks, what it sent and
        # received replaying for the backbone, all it sent, all it received
        "trainer_bytes": [
            [
                t["checks"],
                t["check_bytes"],
                t.get("replay_bytes_sent", 0),
                t.get("replay_bytes_received", 0),
                t["bytes_sent"],
                t.get("bytes_received", 0),
            ]
            for t in trainers
        ],
        "false_accusations": sum(1 for c in run["checks"] if c["verdict"] == "caught")
        + sum(evidence.values()),
        "evidence": [[who, statistic, n] for (who, statistic), n in sorted(evidence.items())],
        "evidence_rounds": sorted({f["round"] for f in run["findings"]}),
        "credit_exact": all(t["credited"] == t["claimed"] for t in trainers),
        # where it is not: each trainer's claimed, credited, and claimed in epochs not settled
        "claimed_credited_unsettled": [
            [t["claimed"], t["credited"], t["unsettled_claimed"]] for t in trainers
        ],
    }


def liar_summary(run: dict[str, Any], liar: Misbehaviour) -> dict[str, Any]:
    bad = next(t for t in run["trainers"] if t["liar"])
    honest = [t for t in run["trainers"] if not (t["liar"] or t["colluder"])]
    computed = bad["computed"]
    return {
        "epochs": run["epochs"],
        "claimed": bad["claimed"],
        "computed": computed,
        "credited": bad["credited"],
        "withdrawn": bad["withdrawn"],
        "credit_over_claim": bad["credited"] / bad["claimed"] if bad["claimed"] else 0.0,
        "credit_over_computed": bad["credited"] / computed if computed else 0.0,
        "verdicts": bad["verdicts"],
        "accused_with": bad["accused_with"],
        "honest_accused": any(t["accused_with"] for t in honest),
        "honest_credit_exact": all(t["credited"] == t["claimed"] for t in honest),
        "honest_credit": [
            {
                k: t.get(k)
                for k in ("claimed", "credited", "settled_epochs_differing", "unsettled_claimed")
            }
            for t in honest
        ],
    }


async def checks(
    honest_checks: int,
    epochs: int,
    liar_epochs: int = 20,
    only: set[str] | None = None,
    start_from: Path | None = None,
) -> dict[str, Any]:
    """``only``: these liars' runs alone (no honest runs; the goals of what ran);
    ``start_from``: a checkpoint every run starts from (a model at rest)."""
    launch = functools.partial(run_swarm, start_from=start_from)
    with tempfile.TemporaryDirectory(prefix="bench-checks-") as tmp:
        root = Path(tmp)
        data = root / "data"
        prepare_demo_data(load_manifest(DEMO_MANIFEST), data)
        out: dict[str, Any] = {}
        enough = lambda lines: len(lines) >= honest_checks  # noqa: E731
        if only is None:
            run = await launch(data, root / "honest", epochs=10_000, rate=1.0, stop_when=enough)
            out["honest_every_epoch"] = honest_summary(run)
            run = await launch(data, root / "default", epochs=epochs, rate=0.1)
            out["default_rate"] = cost_summary(run)
        for name, liar in liars().items():
            if only is not None and name not in only:
                continue
            if liar.rides_from:  # checked at random once trusted: until a check catches it
                # (or, hiding, until a check of it expired)
                stop = _expired if liar.hides else _caught
                run = await launch(data, root / name, epochs=TURNCOAT_EPOCHS, rate=0.1,
                                      liar=liar, stop_when=stop)  # fmt: skip
            else:
                run = await launch(data, root / name, epochs=liar_epochs, rate=0.1, liar=liar)
            out[name] = liar_summary(run, liar)
        out["goals"] = check_goals(out)
        return out


DILOCO = {"mode": "diloco", "round_seconds": 15.0}
"""The demo in diloco with its rounds replayed, at the defaults a project gets (overlap, the
round checks' share at the rate given), rounds of 15 s."""


REPLAY_RUNS = (
    "every_round", "claims_2x", "default_rate", "groups", "mixed", "mixed_scored",
    "half_steps", "copier", "round_refuser",
    "groups_half_steps", "groups_copier", "groups_round_refuser", "groups_copier_colluders",
)  # fmt: skip
DUTIES = (1.0, 1 / 3, 1 / 12)
"""Honest trainers of three speeds (the throttle a volunteer sets): 12, 4 and 1 times the slowest's
inner steps a round, as a fast GPU beside slower devices."""
SCORED = {"mode": "diloco", "round_seconds": 15.0}
"""The demo in diloco with its rounds scored from their updates (``work_checks`` 0, the rate the
run gives it), no replays."""
GROUPS = {"target_group_size": 3}
"""Groups of three: six trainers and the backbone form three groups a round."""
GROUPED_TRAINERS = 6
SYBIL_ROUNDS = 3
"""Rounds a fresh identity claims twice its samples for before it goes: a throwaway identity's
few, in whichever groups the rounds put it."""
COPIER_ROUNDS = 40
"""Rounds at most the copier's run lasts (it stops when a replay catches it): trusted after its
first replay, it is replayed at random within the 5 % budget."""


def diloco_liars() -> dict[str, Misbehaviour]:
    """The free riders of the replayed rounds, each the last of four trainers at the default
    rate: its pseudo-gradient as computed, its claims its counted samples."""
    honest_gradients = (Attack.SCALE, 1.0)
    return {
        # half the inner steps it counts, from its first round (a newcomer: always replayed)
        "half_steps": Misbehaviour(*honest_gradients, computes=0.5),
        # honest until its first replay trusts it, then nothing computed and the model's last
        # move sent as its work: paid on trust until a random replay withdraws it
        "copier": Misbehaviour(*honest_gradients, computes=0.0, rides_from=TURNS_AT, copies=True),
        # nothing computed, its round receipts taken back: "no such method"
        "round_refuser": Misbehaviour(*honest_gradients, computes=0.0, refuses=True),
    }


async def diloco_checks(
    rounds: int, only: set[str] | None = None, start_from: Path | None = None
) -> dict[str, Any]:
    """diloco with replayed rounds, four trainers: every member's every round replayed
    (``work_checks`` = 1); the same swarm with a member that sends its rounds with twice the
    samples it computed (at the default rate: a newcomer's first round is always replayed); and
    honest members at the default rate, what the replays cost there; the free riders of
    ``diloco_liars``, the last of four trainers or (``groups_``) of six in groups of three
    (``only``: these runs of ``REPLAY_RUNS``, and their goals; ``start_from``: a checkpoint every
    run starts from)."""
    launch = functools.partial(run_swarm, start_from=start_from)
    wanted = set(REPLAY_RUNS) if only is None else only
    with tempfile.TemporaryDirectory(prefix="bench-replays-") as tmp:
        root = Path(tmp)
        data = root / "data"
        prepare_demo_data(load_manifest(DEMO_MANIFEST), data)
        out: dict[str, Any] = {}
        goals: dict[str, bool] = {}
        if "every_round" in wanted:
            run = await launch(data, root / "honest", epochs=rounds, rate=1.0, training=DILOCO)
            out["diloco_every_round"] = honest = honest_summary(run) | {
                "replay_seconds": run["recompute_seconds"],
                "run_seconds": run["seconds"],
                "bytes_share_of_trainer_bytes": cost_summary(run)[
                    "check_bytes_share_of_trainer_bytes"
                ],
            }
            goals["no_false_accusation_every_round"] = honest["false_accusations"] == 0
            goals["honest_credit_exact"] = honest["credit_exact"]
        if "claims_2x" in wanted:
            greedy = Misbehaviour(Attack.SCALE, 1.0, claim=2.0)
            run = await launch(
                data, root / "claims_2x", epochs=rounds, rate=0.1, liar=greedy, training=DILOCO
            )
            out["diloco_claims_2x"] = liar = liar_summary(run, greedy)
            goals["over_claimer_credited_at_most_1_2x"] = (
                liar["credit_over_computed"] <= CREDIT_BOUND
            )
            goals["over_claimer_accused"] = bool(liar["accused_with"])
            goals["nobody_honest_accused"] = not liar["honest_accused"]
        if "default_rate" in wanted:
            run = await launch(data, root / "default", epochs=rounds, rate=0.1, training=DILOCO)
            out["diloco_default_rate"] = cost = cost_summary(run) | {
                "replays": [
                    [c["epoch"], c["verdict"], c["compute"], bool(c.get("replayer"))]
                    for c in run["checks"]
                ],
            }
            goals["no_false_accusation_default_rate"] = cost["false_accusations"] == 0
            goals["replays_within_5_percent_of_backbone_time"] = (
                cost["recompute_share_of_backbone_time"] <= COMPUTE_BUDGET
            )
            goals["replays_within_2_percent_of_trainer_bytes"] = (
                cost["check_bytes_share_of_trainer_bytes"] <= BYTES_BUDGET
            )
        if "groups" in wanted:
            sybil = Misbehaviour(Attack.SCALE, 1.0, claim=2.0)
            run = await launch(
                data, root / "groups", epochs=rounds, rate=0.1, liar=sybil, training=DILOCO,
                averaging=GROUPS, trainers=GROUPED_TRAINERS, liar_leaves_at=SYBIL_ROUNDS,
            )  # fmt: skip
            out["diloco_groups"] = grouped = groups_summary(run, sybil)
            goals["sybil_credited_at_most_1_2x"] = grouped["sybil"]["credit_over_computed"] <= (
                CREDIT_BOUND
            )
            goals["honest_credited_at_least_0_9x_in_groups"] = all(
                t["credit_over_computed"] >= HONEST_BOUND for t in grouped["honest"]
            )
            goals["nobody_honest_accused_in_groups"] = grouped["false_accusations"] == 0
        riders: list[tuple[str, Misbehaviour, dict[str, Any]]] = [
            (name, liar, {}) for name, liar in diloco_liars().items()
        ]
        in_groups = {"averaging": GROUPS, "trainers": GROUPED_TRAINERS}
        riders += [(f"groups_{name}", liar, in_groups) for name, liar in diloco_liars().items()]
        riders.append(
            ("groups_copier_colluders", diloco_liars()["copier"], in_groups | {"colluders": 2})
        )
        for name, liar, swarm in riders:
            if name not in wanted:
                continue
            run = await launch(
                data, root / name, epochs=COPIER_ROUNDS if liar.rides_from else rounds,
                rate=0.1, liar=liar, training=DILOCO,
                stop_when=_caught if liar.rides_from else None, **swarm,
            )  # fmt: skip
            out[f"diloco_{name}"] = found = replay_liar_summary(run, liar)
            goals[f"{name}_credited_at_most_1_2x"] = found["credit_over_computed"] <= CREDIT_BOUND
            goals[f"{name}_accused"] = bool(found["accused_with"])
            goals[f"{name}_nobody_honest_accused"] = not found["honest_accused"]
            goals[f"{name}_honest_credited_at_least_0_9x"] = all(
                t["credit_over_computed"] >= HONEST_BOUND for t in found["honest"]
            )
        for name, training, rate in (("mixed", DILOCO, 1.0), ("mixed_scored", SCORED, 0.0)):
            if name not in wanted:
                continue
            run = await launch(
                data, root / name, epochs=rounds, rate=rate, training=training,
                trainers=len(DUTIES), duties=DUTIES,
            )  # fmt: skip
            out[f"diloco_{name}"] = mixed = mixed_summary(run)
            goals[f"{name}_honest_credited_0_9_to_1_1x"] = all(
                HONEST_BOUND <= t["credit_over_computed"] <= 2 - HONEST_BOUND
                for t in mixed["trainers"]
            )
            goals[f"{name}_nobody_accused"] = not any(t["accused_with"] for t in mixed["trainers"])
        out["goals"] = goals
        return out


def replay_liar_summary(run: dict[str, Any], liar: Misbehaviour) -> dict[str, Any]:
    """A free rider of the replayed rounds beside three honest trainers: what it claimed,
    computed and was credited (net of what was withdrawn), in which round a replay caught it and
    how; each honest trainer's credit over all it computed (``trained``: an overlapped round
    landing after its loop stopped reporting is credited, and counted)."""
    bad = next(t for t in run["trainers"] if t["liar"])
    mine = [c for c in run["checks"] if c["verdict"] == "caught"]
    return liar_summary(run, liar) | {
        "rides_from": liar.rides_from,
        "caught_at": min((c["epoch"] for c in mine), default=None),
        "replays": [
            [c["epoch"], c["verdict"], c["compute"], bool(c.get("replayer"))] for c in run["checks"]
        ],
        "liar_replays": bad["checks"],
        "recompute_share_of_backbone_time": run["recompute_seconds"] / run["seconds"],
        "honest": [
            {
                "trained": t["trained"],
                "credited": t["credited"],
                "credit_over_computed": t["credited"] / t["trained"] if t["trained"] else 0.0,
                "replays": t["checks"],
                "accused_with": t["accused_with"],
            }
            for t in run["trainers"]
            if not (t["liar"] or t["colluder"])
        ],
        # trainers that pass the liar's rounds they are asked to replay (``collude``)
        "colluders": [
            {
                "credited": t["credited"],
                "trained": t["trained"],
                "passed_for_partner": t["passed_for_partner"],
                "accused_with": t["accused_with"],
            }
            for t in run["trainers"]
            if t["colluder"]
        ],
    }


def mixed_summary(run: dict[str, Any]) -> dict[str, Any]:
    """Per honest trainer of a swarm of mixed speeds: its throttle, the samples it computed
    (``trained``: all of them, the round the run stopped in too; ``landed``: those of the rounds
    it saw land) and was credited, how often it was replayed, and whether anyone accused it."""
    return {
        "epochs": run["epochs"],
        "replays": len(run["checks"]),
        "verdicts": dict(Counter(c["verdict"] for c in run["checks"])),
        "worst_margin": max((c["margin"] for c in run["checks"] if c["verdict"] == "passed"),
                            default=None),
        "replay_share_of_backbone_time": run["recompute_seconds"] / run["seconds"],
        "trainers": [
            {
                "duty": round(duty, 3),
                "trained": t["trained"],
                "landed": t["computed"],
                "credited": t["credited"],
                "credit_over_computed": t["credited"] / t["trained"] if t["trained"] else 0.0,
                "unsettled_claimed": t["unsettled_claimed"],
                "settled_epochs_differing": t["settled_epochs_differing"],
                "replays": t["checks"],
                "verdicts": t["verdicts"],
                "accused_with": t["accused_with"],
            }
            for duty, t in zip(DUTIES, run["trainers"], strict=True)
        ],
    }  # fmt: skip


def groups_summary(run: dict[str, Any], liar: Misbehaviour) -> dict[str, Any]:
    """Per trainer of a swarm of several groups: what it computed, claimed and was credited, how
    often it was replayed; the liar (a fresh identity that leaves) apart. An honest trainer's
    credit is set against all it computed (``trained``: the round the run stopped in too, whose
    overlapped exchange may land after its loop stopped reporting; ``landed``: those of the rounds
    its loop saw land); the liar's against what its reported rounds computed (it may skip work)."""

    def trainer(t: dict[str, Any], honest: bool = True) -> dict[str, Any]:
        computed = t["trained"] if honest else t["computed"]
        return {
            "computed": computed,
            "landed": t["computed"],
            "claimed": t["claimed"],
            "credited": t["credited"],
            "credit_over_computed": t["credited"] / computed if computed else 0.0,
            "withdrawn": t["withdrawn"],
            "replays": t["checks"],
            "verdicts": t["verdicts"],
            "accused_with": t["accused_with"],
        }

    honest = [trainer(t) for t in run["trainers"] if not t["liar"]]
    sybil = next(trainer(t, honest=False) for t in run["trainers"] if t["liar"])
    return {
        "epochs": run["epochs"],
        "groups_of": GROUPS["target_group_size"],
        "trainers": len(run["trainers"]),
        "replays": [
            [c["epoch"], c["verdict"], c["compute"], bool(c.get("replayer"))] for c in run["checks"]
        ],
        "false_accusations": sum(1 for t in honest if t["accused_with"]),
        "verdicts": dict(Counter(c["verdict"] for c in run["checks"])),
        "honest": honest,
        "sybil": sybil | {"leaves_at": SYBIL_ROUNDS, "claim": liar.claim},
        "recompute_share_of_backbone_time": run["recompute_seconds"] / run["seconds"],
    }


def _caught(lines: list[dict[str, Any]]) -> bool:
    """Whether a check caught someone."""
    return any(c["verdict"] == "caught" for c in lines)


def _expired(lines: list[dict[str, Any]]) -> bool:
    """Whether a check was made three times unreached, and checks went on four epochs past it:
    the backbone no longer keeps that epoch's parameters, so the check expired at a landing."""
    tries = Counter(c["epoch"] for c in lines if c["verdict"] == "unreached")
    newest = max((c["epoch"] for c in lines), default=-1)
    return any(n >= 3 and newest >= epoch + 4 for epoch, n in tries.items())


def check_goals(out: dict[str, Any]) -> dict[str, bool]:
    """The goals of the runs in ``out`` (a run left out by ``--liars`` sets none)."""
    goals: dict[str, bool] = {}
    ran = [k for k in liars() if k in out]
    honest, cost = out.get("honest_every_epoch"), out.get("default_rate")
    if honest is not None and cost is not None:
        goals["no_false_accusation"] = (
            honest["false_accusations"] == 0 and cost["false_accusations"] == 0
        )
        goals["checks_within_5_percent_of_backbone_time"] = (
            cost["recompute_share_of_backbone_time"] <= COMPUTE_BUDGET
        )
        goals["checks_within_2_percent_of_trainer_bytes"] = (
            cost["check_bytes_share_of_trainer_bytes"] <= BYTES_BUDGET
        )
    riders = [out[k] for k in ("free_rider", "free_rider_10") if k in out]
    if riders:
        goals["free_rider_credited_at_most_10_percent"] = all(
            r["credit_over_claim"] <= FREE_RIDER_BOUND and r["accused_with"] for r in riders
        )
    inflaters = [out[k] for k in ("claims_10x", "claims_100x") if k in out]
    if inflaters:
        goals["inflated_claims_credited_at_most_1_2x"] = all(
            r["credit_over_computed"] <= CREDIT_BOUND and r["accused_with"] for r in inflaters
        )
    if "refuser" in out:
        goals["refuser_credited_nothing_and_accused"] = (
            out["refuser"]["credited"] == 0 and "work_refused" in out["refuser"]["accused_with"]
        )
    if "turncoat" in out:
        goals["turncoat_keeps_at_most_what_it_computed"] = out["turncoat"][
            "credit_over_computed"
        ] <= CREDIT_BOUND and bool(out["turncoat"]["accused_with"])
    if "hider" in out:
        # the checks accuse it of nothing (reducers may, of the zeros it sends)
        goals["hider_keeps_at_most_what_it_computed"] = out["hider"][
            "credit_over_computed"
        ] <= CREDIT_BOUND and not any(a.startswith("work_") for a in out["hider"]["accused_with"])
    goals["honest_credit_exact"] = all(out[k]["honest_credit_exact"] for k in ran) and (
        honest is None or cost is None or (honest["credit_exact"] and cost["credit_exact"])
    )
    goals["nobody_honest_accused"] = not any(out[k]["honest_accused"] for k in ran)
    return goals
