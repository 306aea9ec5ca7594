"""Plausible data for ``FakeEngine``: a calm computer, the demo project, a month of contribution, a
leaderboard, a loss curve, projects' info as an engine gives it, and a project served at a URL
(``REMOTE_PREVIEW``: its preview, and its info once joined).

Generated from a seed, so tests and screenshots see the same numbers on every run, and shaped like
what a volunteer with one mid-range GPU would see after a few weeks (days off included).
"""

from __future__ import annotations

import datetime as _dt
import math
import random
from collections.abc import Iterable

from core.api.schema import (
    API_VERSION,
    Amounts,
    CreditCheck,
    DayAmounts,
    Diagnostics,
    EpochPoint,
    HeldOutPoint,
    HistoryDay,
    Leaderboard,
    LeaderboardEntry,
    LeaderboardTotals,
    MyRank,
    Progress,
    ProjectInfo,
    ProjectKind,
    ProjectOffer,
    ProjectPreview,
    ResourceUse,
    Statistics,
    TrainingDevice,
)
from core.policy import Conditions, GpuState

DAY = 86_400.0
DEMO = "barnraise-demo"

DEMO_OFFER = ProjectOffer(
    name=DEMO,
    description=(
        "A tiny ALBERT masked language model trained on the prose of Python's documentation."
    ),
    manifest="/home/you/.cache/barnraise/swarm/barnraise-demo/moderated.toml",
    source="local_swarm",
    initial_peers=["/ip4/127.0.0.1/tcp/40145/p2p/12D3KooWDemoBackbone"],
    data_base="http://127.0.0.1:40146/",
    note="2 trainers and a backbone on this computer since 09:12; needs an account",
    moderated=True,
)
"""The local demo swarm, as a running ``barnraise swarm --moderated`` offers it."""

PROGRESS = Progress(
    epoch=149,
    collaboration_epoch=149,
    samples_per_second=286.4,
    collaboration_samples_per_second=1312.9,
    peers=5,
    session_samples=96_512,
)
"""Training of the demo project, some weeks in."""


def project_info(offer: ProjectOffer, *, active: bool, device: str) -> ProjectInfo:
    """``offer`` once attached."""
    return ProjectInfo(
        name=offer.name,
        description=offer.description,
        manifest=offer.manifest,
        initial_peers=list(offer.initial_peers),
        data_base=offer.data_base,
        device=device,
        active=active,
        local_swarm=offer.source == "local_swarm",
    )


def remote_project_info(preview: ProjectPreview, *, active: bool, device: str) -> ProjectInfo:
    """The project of ``preview`` once joined by its URL."""
    return ProjectInfo(
        name=preview.name,
        description=preview.description,
        manifest=f"/home/you/.local/share/barnraise/projects/{preview.name}/project.toml",
        device=device,
        active=active,
        source_url=preview.url,
        project_key=preview.project_key,
        manifest_version=preview.version,
    )


def attached_offer(
    project: ProjectInfo, *, moderated: bool, kind: ProjectKind = "collaborative"
) -> ProjectOffer:
    """An attached project among the offers, as the engine lists it after the running swarms."""
    return ProjectOffer(
        project.name,
        project.description,
        project.manifest,
        "attached",
        project.initial_peers,
        project.data_base,
        note="attached" + (", contributing to it" if project.active else ""),
        moderated=moderated,
        kind=kind,
    )


CALM = Conditions(
    idle_seconds=3600.0,
    on_battery=False,
    battery_percent=None,
    other_cpu_percent=6.0,
    available_memory_mb=9200.0,
    cpu_count=8,
    gpu=GpuState(free_mb=7400.0, total_mb=8192.0, temperature_c=64.0),
)
"""What the sensors of a desktop with a mid-range GPU see while its user is away: nothing stops
training. (The engine's own part, project and pause, is filled in by the fake.)"""

# Names from several scripts and countries, as a real project's volunteers would have.
VOLUNTEER_NAMES = (
    "amara", "li.wei", "sourav", "jóhanna", "kwame", "ananya", "mateus", "yuki", "fatima",
    "olek", "ngozi", "tanvir", "ингрид", "carlos", "মিতা", "priya", "noah", "zeynep", "arjun",
    "emma", "hiro", "lucía", "dmitri", "aiko", "samuel", "chen", "leila", "tomás", "farida",
    "kofi", "ravi", "maja", "pablo", "sakura", "jonas", "amina", "ivan", "meera", "theo", "rosa",
)  # fmt: skip


def contribution_days(now: float, days: int, *, seed: int = 7) -> list[DayAmounts]:
    """``days`` local days ending today, oldest first; about one day in four without work."""
    rng = random.Random(seed)
    today = _dt.datetime.fromtimestamp(now).date()
    out = []
    for back in range(days - 1, -1, -1):
        day = today - _dt.timedelta(days=back)
        worked = back == 0 or rng.random() > 0.25
        if not worked:
            out.append(DayAmounts(day.isoformat(), Amounts()))
            continue
        hours = rng.uniform(0.6, 7.5) if back else 2.4
        speed = rng.uniform(240.0, 310.0)
        samples = int(hours * 3600 * speed)
        out.append(
            DayAmounts(
                day.isoformat(),
                Amounts(
                    samples=samples,
                    compute_seconds=round(hours * 3600, 1),
                    epochs=samples // 4096,
                    rounds=samples // 4096,
                    bytes_sent=int(hours * rng.uniform(55e6, 75e6)),
                    bytes_received=int(hours * rng.uniform(60e6, 85e6)),
                ),
            )
        )
    return out


def no_statistics(project: str | None, now: float, days: int) -> Statistics:
    """A first start's statistics: ``days`` days, all without work."""
    blank = [DayAmounts(d.day, Amounts()) for d in contribution_days(now, days)]
    return Statistics(project, Amounts(), Amounts(), 0, blank)


def statistics(
    project: str | None, now: float, days: int, history: int = 90, *, seed: int = 7
) -> Statistics:
    """Statistics over ``days`` days; the totals cover a longer ``history``; another ``seed``
    makes up another month (another project's)."""
    everything = contribution_days(now, max(days, history), seed=seed)
    shown = everything[-days:]
    month = _dt.datetime.fromtimestamp(now).strftime("%Y-%m")
    month_bytes = sum(
        d.amounts.bytes_sent + d.amounts.bytes_received for d in everything if d.day[:7] == month
    )
    return Statistics(
        project=project,
        totals=_sum(d.amounts for d in everything),
        today=shown[-1].amounts,
        month_bytes=month_bytes,
        days=shown,
    )


def _sum(items: Iterable[Amounts]) -> Amounts:
    total = Amounts()
    for a in items:
        total = Amounts(
            total.samples + a.samples,
            total.compute_seconds + a.compute_seconds,
            total.epochs + a.epochs,
            total.rounds + a.rounds,
            total.bytes_sent + a.bytes_sent,
            total.bytes_received + a.bytes_received,
        )
    return total


def loss_curve(now: float, epochs: int, *, seed: int = 3) -> list[EpochPoint]:
    """A falling, slightly noisy masked-LM loss over ``epochs`` epochs ending now."""
    rng = random.Random(seed)
    points = []
    for i in range(epochs):
        loss = 4.2 + 4.1 * math.exp(-i / 45.0) + rng.gauss(0.0, 0.06)
        peers = 3 + (i // 40) % 4
        speed = peers * rng.uniform(70.0, 95.0)
        points.append(
            EpochPoint(
                epoch=i,
                time=now - (epochs - i) * 4096 / speed,
                loss=round(loss, 4),
                samples=4096 + rng.randrange(0, 300),
                samples_per_second=round(speed, 1),
                peers=peers,
            )
        )
    return points


UNIGRAM_FLOOR = 6.24
"""The demo's unigram floor (what a model that only counts words scores on its held-out text):
the sample curve starts above it, at a uniform guess, and falls below it."""


def held_out_curve(points: list[EpochPoint], every: int = 10) -> list[HeldOutPoint]:
    """The backbone's evaluations every ``every`` epochs of ``points``: a held-out loss a little
    above the training loss (text the model never saw), an accuracy that rises as it falls, and
    the demo's unigram floor beside each."""
    rng = random.Random(5)
    evaluated = []
    for point in points:
        if point.loss is None or point.epoch % every:
            continue
        loss = point.loss + 0.15 + rng.gauss(0.0, 0.02)
        evaluated.append(
            HeldOutPoint(
                epoch=point.epoch,
                time=point.time + 20.0,
                loss=round(loss, 4),
                accuracy=round(max(0.0, min(1.0, 0.95 - loss / 9.0)), 4),
                samples=256,
                floor=UNIGRAM_FLOOR,
            )
        )
    return evaluated


def leaderboard(
    project: str, you: str, your_samples: int, now: float
) -> tuple[Leaderboard, MyRank]:
    """The top of the board and the user's own place (seventh of forty); an eighth of the user's
    samples are their expert servers' work for others."""
    rng = random.Random(11)
    others = [
        (name, int(your_samples * factor))
        for name, factor in zip(
            VOLUNTEER_NAMES,
            [3.1, 2.4, 1.9, 1.6, 1.3, 1.05, 0.93, 0.8, 0.62, 0.55]
            + [0.5 * 0.9**i for i in range(len(VOLUNTEER_NAMES) - 10)],
            strict=True,
        )
    ]
    rows = sorted([*others, (you, your_samples)], key=lambda r: -r[1])
    entries = []
    for rank, (name, samples) in enumerate(rows, start=1):
        devices = 1 + rng.randrange(0, 3) if name != you else 1
        entries.append(
            LeaderboardEntry(
                rank=rank,
                username=name,
                samples=samples,
                compute_seconds=round(samples / rng.uniform(250.0, 900.0), 1),
                active_devices=rng.randrange(0, devices + 1),
                devices=devices,
                last_seen=now - rng.uniform(0, 6 * 3600),
                expert_samples=samples // 8 if name == you else 0,
            )
        )
    mine = next(e for e in entries if e.username == you)
    index = mine.rank - 1
    history = [
        HistoryDay(d.day, d.amounts.samples, d.amounts.compute_seconds)
        for d in contribution_days(now, 30)
    ]
    board = Leaderboard(
        project=project,
        time=now,
        users=entries[:10],
        totals=LeaderboardTotals(
            samples=sum(e.samples for e in entries),
            compute_seconds=round(sum(e.compute_seconds for e in entries), 1),
            users=len(entries),
            epochs=sum(e.samples for e in entries) // 4096,
            expert_samples=sum(e.expert_samples for e in entries),
        ),
    )
    place = MyRank(
        project=project,
        username=you,
        rank=mine.rank,
        percentile=round(100.0 * (1 - index / len(entries)), 1),
        samples=mine.samples,
        compute_seconds=mine.compute_seconds,
        above=entries[max(0, index - 2) : index],
        below=entries[index + 1 : index + 3],
        history_7d=history[-7:],
        history_30d=history,
        expert_samples=mine.expert_samples,
    )
    return board, place


FAKE_PEER = "12D3KooWFakeEnginePeerKeyForTheAppsTests"
"""The fake engine's peer key as its credit check names it (made up, not a real PeerID)."""


def matching_credit(project: str, *, epochs: int = 240, samples: int = 512) -> CreditCheck:
    """A credit check whose counts agree: ``epochs`` epochs of ``samples`` each."""
    total = epochs * samples
    return CreditCheck(
        project=project,
        peer=FAKE_PEER,
        local_samples=total,
        credited_samples=total,
        matches=True,
        summary=f"Your counts match the project's: {total:,} samples over {epochs:,} epochs.",
        epochs=epochs,
        since=1000,
        credited_total=1_843_200,
    )


def diagnostics(started: float) -> Diagnostics:
    return Diagnostics(
        engine_version="0.1.0",
        api_version=API_VERSION,
        pid=4242,
        platform="Linux-6.1-x86_64 (fake engine)",
        python="3.11.7",
        started=started,
        paths={"logs": "/home/you/.local/state/barnraise/log"},
        torch="2.13.0",
        accelerator=[
            f"cuda: {GPU} — {GPU_REASON}",
            "torch 2.13.0+cu130, CUDA 13.0",
            "NVIDIA driver 580.95.05, CUDA 13.0",
            (
                f"GPU 0: {GPU}, compute capability 8.6, 2310 of 12288 MB in use, 54 °C, "
                "3 % busy, 2 other program(s) holding 410 MB"
            ),
        ],
        log_tail=[
            "2026-11-22 09:12:03 INFO    core.engine.engine: running: Contributing",
            "2026-11-22 09:40:17 INFO    core.engine.engine: waiting: Waiting: you are away",
        ],
    )


GPU = "NVIDIA GeForce RTX 3060 (12 GB)"
GPU_REASON = "NVIDIA driver 580.95.05 supports CUDA 13.0; torch 2.13.0+cu130 is built for CUDA 13.0"


def training_device(setting: str) -> TrainingDevice:
    """What the fake's computer, with one mid-range NVIDIA GPU, trains on for a device setting."""
    versions = {"driver": "580.95.05", "cuda": "13.0", "torch": "2.13.0+cu130"}
    if setting.startswith("cpu"):
        why = f"this project is set to train on {setting}; {GPU} was found, which auto would use"
        return TrainingDevice("cpu", "CPU", why, setting, **versions)
    if setting == "auto":
        return TrainingDevice("cuda", GPU, GPU_REASON, setting, **versions)
    return TrainingDevice(
        "cuda", GPU, f"this project is set to train on {setting}", setting, **versions
    )


REMOTE_PREVIEW = ProjectPreview(
    url="https://albert.example.org",
    name="open-albert",
    description=(
        "An ALBERT-large language model for Bengali, trained by volunteers on Wikipedia and "
        "OSCAR text. Organized by the Example University NLP group."
    ),
    kind="collaborative",
    mode="moderated",
    allow_signup=True,
    project_key="12D3KooWA4Xop1JaT3MHxwYMkCepYsv4iPVopMXwCz5iHYdBfeSB",
    key_source="first-use",
    coordinator_url="https://albert.example.org",
    version=3,
    uses=ResourceUse(
        device=GPU,
        parameters=17_683_968,
        disk_bytes=1_340_000_000,
        network_bytes_per_hour=610_000_000,
        notes=[
            "network: about 610 MB an hour while contributing (averaging with the other peers)",
            "disk: 3 checkpoints of 210 MB and about 700 MB of cached text",
        ],
    ),
)
"""A project served at a URL, as a preview shows it (``FakeEngine`` answers it by default)."""
