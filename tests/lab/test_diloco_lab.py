"""A diloco project trains across a cone and a symmetric NAT, and outlives a volunteer's crash.

The demo project in diloco mode with the sparse codec (``topk``): a backbone on the public
host with default arguments, a volunteer's ``barnraise peer`` in each home with nothing but
``--initial-peers``. Asserted: the homes reach the backbone directly and each other only through
the relay; two rounds in which all three average, sparse chunks sent, and both volunteers hold
the same outer parameters afterwards (the epochs' anchor digests agree); then the symmetric home's
volunteer is killed mid-round and the other goes on landing rounds with the backbone.

With groups of two (``target_group_size = 2``), five trainers (two on the public host, two in the
cone home, one in the symmetric home) and the backbone make rounds of several groups, whose
columns average each slot across them. Asserted: rounds that all five land in groups of two,
everyone with the same outer parameters (one model, not one per group); then the symmetric home's
volunteer is killed mid-round and the other four go on landing one model (one round apart at
most: a member apart from most takes their outer parameters).
"""

from __future__ import annotations

import re
import signal
import time
from functools import partial
from pathlib import Path

import pytest

from core.project import load_manifest
from core.swarm.demo_data import DEMO_MANIFEST
from core.trust.identity import Identity
from tests.lab.conftest import MakeLab
from tests.lab.procs import Event, LabProcess, backbone_and_homes, peer_args, wait_connected

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(420)]

# Long enough that one thread takes dozens of inner steps a round on a loaded 2-core machine and
# that the exchange (matchmaking up to 5 s, then a relayed all-reduce) ends within the round;
# short enough that a handful of rounds fit in a few minutes.
ROUND_SECONDS = 15


@pytest.fixture(scope="module")
def diloco_project(tmp_path_factory: pytest.TempPathFactory, demo_data: Path) -> Path:
    """The demo project in diloco mode, its pseudo-gradients sent top-k sparse at 2 bits."""
    root = tmp_path_factory.mktemp("lab-diloco-project")
    for name in ("shards", "tokenizer.json"):
        (root / name).symlink_to(demo_data / name)
    text = DEMO_MANIFEST.read_text()
    text, trained = re.subn(
        r"^\[training\]\n",
        f'[training]\nmode = "diloco"\nround_seconds = {ROUND_SECONDS}\n'
        # top-k with error feedback: the residual carries the momentum (modes.md)
        "outer_lr = 1.0\nouter_momentum = 0.0\n",
        text,
        flags=re.MULTILINE,
    )
    # the sparse codec on the wire, so that its chunks are what crosses the relay
    text, coded = re.subn(
        r"^codec = .*$",
        'codec = "topk"\ndensity = 0.05\nbits = 2',
        text,
        flags=re.MULTILINE,
    )
    assert (trained, coded) == (1, 1), "the demo manifest's layout changed"
    # the backbone's key named, as a project's folder and ``barnraise swarm`` name it: its word
    # confirms the collaboration's epoch and state
    key = Identity.load_or_create(root / "backbone-key.pem")
    text += f'\n[access]\nbackbone_keys = ["{key.peer_id}"]\n'
    path = root / "project.toml"
    path.write_text(text)
    manifest = load_manifest(path)  # a refused combination fails here, naming its key
    assert manifest.access.backbone_keys == (str(key.peer_id),)
    assert manifest.training.mode == "diloco"
    assert manifest.training.round_seconds == ROUND_SECONDS
    assert (manifest.averaging.codec, manifest.averaging.density) == ("topk", 0.05)
    return path


def backbone_key(project: Path) -> Path:
    """The key file of the backbone ``project`` names, beside it."""
    return project.parent / "backbone-key.pem"


def epoch_of(proc: LabProcess, epoch: int, timeout: float) -> Event:
    return proc.wait_for(lambda e: e.get("event") == "epoch" and e["epoch"] == epoch, timeout)


def full_round(e: Event, group_size: int, after: int) -> bool:
    """A landed round of ``group_size`` members, later than epoch ``after``, that sent chunks."""
    return (
        e.get("event") == "epoch"
        and e["epoch"] > after
        and bool(e["averaged"])
        and e["group_size"] == group_size
        and e["bytes_sent"] > 0
    )


def agreed_round(one: LabProcess, other: LabProcess, after: int) -> int:
    """The first round after epoch ``after`` that both volunteers landed in a group of three (the
    backbone the third) with samples of their own, checking on the way that every round of three
    left both with the same outer parameters."""
    while True:
        mine = one.wait_for(partial(full_round, group_size=3, after=after), 8 * ROUND_SECONDS)
        theirs = epoch_of(other, mine["epoch"], 4 * ROUND_SECONDS)
        assert re.fullmatch(r"[0-9a-f]{64}", mine["anchor"]), mine
        assert theirs["anchor"] == mine["anchor"], (mine, theirs)
        # a volunteer that joined just before a round's end may have had no sample in it yet
        if full_round(theirs, 3, after) and mine["samples"] > 0 and theirs["samples"] > 0:
            return int(mine["epoch"])
        after = mine["epoch"]


def test_diloco_rounds_cross_a_cone_and_a_symmetric_nat(
    make_lab: MakeLab, diloco_project: Path, tmp_path: Path
) -> None:
    lab = make_lab("cone", "symmetric")
    aux, homes, ids = backbone_and_homes(
        lab, diloco_project, tmp_path, "--identity", str(backbone_key(diloco_project))
    )
    h1, h2 = homes["h1"], homes["h2"]
    # a symmetric NAT cannot be punched: the rounds' traffic between the homes goes by the relay
    assert wait_connected(h1, ids["h2"], {"direct", "punched", "relayed"}, 180) == "relayed"

    # two rounds of all three, each leaving both volunteers with the same outer parameters
    second = agreed_round(h1, h2, agreed_round(h1, h2, -1))

    # the symmetric home's volunteer crashes halfway through a round: no goodbye, its progress
    # record left to expire
    time.sleep((ROUND_SECONDS / 2 - time.time() % ROUND_SECONDS) % ROUND_SECONDS)
    h2.proc.send_signal(signal.SIGKILL)
    assert h2.proc.wait(30) == -signal.SIGKILL
    # h1 goes on with the backbone in rounds of two, landing every one
    first = h1.wait_for(lambda e: full_round(e, 2, second), 4 * ROUND_SECONDS)
    after = h1.wait_for(lambda e: full_round(e, 2, first["epoch"]), 3 * ROUND_SECONDS)
    assert after["epoch"] == first["epoch"] + 1, (first, after)
    assert after["samples"] > 0
    # the backbone was the other member: its metrics of those rounds count h1's samples alone,
    # once a replay of h1's rounds supports them (the round checks, on by default, may pay them
    # in a late report)
    metrics = aux.wait_for(
        lambda e: (
            e.get("event") == "metrics"
            and e["epoch"] >= first["epoch"]
            and any(samples > 0 for samples in e["contributions"].values())
        ),
        8 * ROUND_SECONDS,
    )
    counted = {peer for peer, samples in metrics["contributions"].items() if samples > 0}
    assert counted == {ids["h1"]}, metrics


# ---- more trainers than a group ------------------------------------------------------------

GROUP_SIZE = 2
TRAINERS = {"pub-0": "pub", "pub-1": "pub", "h1-0": "h1", "h1-1": "h1", "h2-0": "h2"}
"""Where the five trainers run (name: lab host). Behind a router a trainer averages as a client (it
reduces nothing and never leads), so a group needs a member others can dial: the backbone and the
two public trainers lead the three groups of a full round, the three volunteers behind the cone
and the symmetric NAT join them (two computers of one household share the cone home)."""
VICTIM = "h2-0"
"""Killed mid-round: the symmetric home's volunteer. Four trainers and the backbone are then a
round of 2 + 2 + 1, whose group of one lands with the other groups' columns."""


@pytest.fixture(scope="module")
def grouped_project(tmp_path_factory: pytest.TempPathFactory, diloco_project: Path) -> Path:
    """``diloco_project`` with groups of two, so that a round forms several groups; a group may be
    of one (``min_group_size = 1``): a round of an odd number of members has one."""
    root = tmp_path_factory.mktemp("lab-diloco-grouped-project")
    for name in ("shards", "tokenizer.json"):
        (root / name).symlink_to((diloco_project.parent / name).resolve())
    text = diloco_project.read_text()
    text, grouped = re.subn(
        r"^target_group_size = .*$", f"target_group_size = {GROUP_SIZE}", text, flags=re.MULTILINE
    )
    text, least = re.subn(r"^min_group_size = .*$", "min_group_size = 1", text, flags=re.MULTILINE)
    assert (grouped, least) == (1, 1), "the demo manifest's layout changed"
    (root / "backbone-key.pem").symlink_to(backbone_key(diloco_project))
    path = root / "project.toml"
    path.write_text(text)
    manifest = load_manifest(path)
    assert manifest.training.mode == "diloco"
    assert manifest.training.round_seconds == ROUND_SECONDS
    assert (manifest.averaging.target_group_size, manifest.averaging.min_group_size) == (
        GROUP_SIZE,
        1,
    )
    assert manifest.averaging.codec == "topk"
    return path


Landings = dict[int, dict[str, Event]]
"""Landed rounds by epoch: each trainer's epoch event of it."""


def landings(trainers: dict[str, LabProcess], after: int) -> Landings:
    """The rounds after epoch ``after`` that the trainers have reported so far."""
    table: Landings = {}
    for name, proc in trainers.items():
        for e in proc.drain():
            if e.get("event") == "epoch" and e["epoch"] > after:
                table.setdefault(int(e["epoch"]), {})[name] = e
    return table


def split(row: dict[str, Event]) -> bool:
    """Whether trainers that landed the same round hold different outer parameters."""
    return len({e["anchor"] for e in row.values()}) > 1


def show(table: Landings, trainers: dict[str, LabProcess]) -> str:
    """One line a landed round (each trainer's group size, anchor digest and samples), then the
    last log lines of every trainer that landed none of them."""
    lines = [
        f"epoch {epoch}{' SPLIT' if split(row) else ''}: "
        + ", ".join(
            f"{name} g{e['group_size']} {e['anchor'][:8]} s{e['samples']}"
            for name, e in sorted(row.items())
        )
        for epoch, row in sorted(table.items())
    ]
    for name, proc in trainers.items():
        if not any(name in row for row in table.values()):
            lines += [f"-- {name} landed none; its log ends:", proc.tail(12)]
    return "\n".join(lines)


def one_model(
    trainers: dict[str, LabProcess],
    after: int,
    count: int,
    timeout: float,
    *,
    apart: int = 0,
    assembling: bool = False,
) -> list[int]:
    """The first ``count`` rounds after epoch ``after`` that every one of ``trainers`` landed,
    all with the same outer parameters, in groups smaller than the swarm. Fails at once when more
    than ``apart`` rounds left trainers that landed them with different outer parameters; with
    ``assembling``, not counting the rounds up to the first one that everyone landed alike (while
    the swarm assembles, its members' first rounds may meet different parts of it, a round that
    everyone landed too, and ``mend`` brings them together; it must within ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        for name, proc in trainers.items():
            assert proc.proc.poll() is None, f"{name} ended\n{proc.tail()}"
        table = landings(trainers, after)
        full = [epoch for epoch, row in sorted(table.items()) if set(row) == set(trainers)]
        agreed = [epoch for epoch in full if not split(table[epoch])]
        counted = [e for e in table if not assembling or (agreed and e > agreed[0])]
        apart_epochs = sorted(e for e in counted if split(table[e]))
        assert len(apart_epochs) <= apart, (
            f"trainers landed the rounds of epochs {apart_epochs} with different outer parameters"
            f"\n{show(table, trainers)}"
        )
        if len(agreed) >= count:
            for epoch in agreed[:count]:
                for e in table[epoch].values():
                    assert re.fullmatch(r"[0-9a-f]{64}", e["anchor"]), e
                    assert e["averaged"], e
                    assert e["round_samples"] > 0, e
                    # several groups: none holds the whole swarm
                    assert 1 <= e["group_size"] <= GROUP_SIZE < len(trainers), e
            return agreed[:count]
        assert time.monotonic() < deadline, (
            f"no {count} rounds after epoch {after} that all of {sorted(trainers)} landed alike "
            f"within {timeout:g} s\n{show(table, trainers)}"
        )
        time.sleep(1.0)


def test_diloco_rounds_of_several_groups_land_one_model_across_the_nats(
    make_lab: MakeLab, grouped_project: Path, tmp_path: Path
) -> None:
    lab = make_lab("cone", "symmetric")
    aux = LabProcess(
        lab,
        "pub",
        [
            "backbone",
            *peer_args(grouped_project, tmp_path / "aux", "--checkpoint-every", "0"),
            "--identity",
            str(backbone_key(grouped_project)),
        ],
        tmp_path / "backbone.log",
    )
    backbone = aux.wait_for(lambda e: e.get("event") == "ready", 120)["address"]
    aux_id = backbone.rsplit("/", 1)[-1]
    trainers = {
        name: LabProcess(
            lab,
            where,
            ["peer", *peer_args(grouped_project, tmp_path / name, "--initial-peers", backbone)],
            tmp_path / f"{name}.log",
        )
        for name, where in TRAINERS.items()
    }
    for proc in trainers.values():
        proc.wait_for(lambda e: e.get("event") == "ready", 180)
    for proc in trainers.values():
        assert wait_connected(proc, aux_id, {"direct"}, 120) == "direct"

    # two rounds of all five in three groups of two, each leaving everyone with the same outer
    # parameters: the groups' columns made one mean of everyone's work
    second = one_model(trainers, -1, 2, 10 * ROUND_SECONDS, assembling=True)[-1]

    # the symmetric home's volunteer crashes halfway through a round: no goodbye, its progress
    # record left to expire
    time.sleep((ROUND_SECONDS / 2 - time.time() % ROUND_SECONDS) % ROUND_SECONDS)
    trainers[VICTIM].proc.send_signal(signal.SIGKILL)
    assert trainers[VICTIM].proc.wait(30) == -signal.SIGKILL
    killed_after = max([second, *landings(trainers, second)])
    # the other four go on landing one model; the round the crash broke may land apart, which
    # the next one repairs (a member apart from most takes their outer parameters)
    survivors = {name: proc for name, proc in trainers.items() if name != VICTIM}
    one_model(survivors, killed_after, 2, 8 * ROUND_SECONDS, apart=1)
