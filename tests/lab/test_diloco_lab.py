"""A diloco project trains across a cone and a symmetric NAT, and outlives a volunteer's crash.

The demo project in diloco mode with the sparse codec (``topk``): an auxiliary peer on the public
host with default arguments, a volunteer's ``barnraise peer`` in each home with nothing but
``--initial-peers``. Asserted: the homes reach the backbone directly and each other only through
the relay; two rounds in which all three average, sparse chunks sent, and both volunteers hold
the same outer parameters afterwards (the epochs' anchor digests agree); then the symmetric home's
volunteer is killed mid-round and the other goes on landing rounds with the backbone.
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
from tests.lab.conftest import MakeLab
from tests.lab.procs import Event, LabProcess, peer_args, wait_connected

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
    path = root / "project.toml"
    path.write_text(text)
    manifest = load_manifest(path)  # a refused combination fails here, naming its key
    assert manifest.training.mode == "diloco"
    assert manifest.training.round_seconds == ROUND_SECONDS
    assert (manifest.averaging.codec, manifest.averaging.density) == ("topk", 0.05)
    return path


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
        assert re.fullmatch(r"[0-9a-f]{16}", mine["anchor"]), mine
        assert theirs["anchor"] == mine["anchor"], (mine, theirs)
        # a volunteer that joined just before a round's end may have had no sample in it yet
        if full_round(theirs, 3, after) and mine["samples"] > 0 and theirs["samples"] > 0:
            return int(mine["epoch"])
        after = mine["epoch"]


def test_diloco_rounds_cross_a_cone_and_a_symmetric_nat(
    make_lab: MakeLab, diloco_project: Path, tmp_path: Path
) -> None:
    lab = make_lab("cone", "symmetric")
    aux = LabProcess(
        lab,
        "pub",
        ["aux", *peer_args(diloco_project, tmp_path / "aux", "--checkpoint-every", "0")],
        tmp_path / "aux.log",
    )
    backbone = aux.wait_for(lambda e: e.get("event") == "ready", 120)["address"]
    aux_id = backbone.rsplit("/", 1)[-1]
    homes = {
        home: LabProcess(
            lab,
            home,
            ["peer", *peer_args(diloco_project, tmp_path / home, "--initial-peers", backbone)],
            tmp_path / f"{home}.log",
        )
        for home in ("h1", "h2")
    }
    ids = {
        home: proc.wait_for(lambda e: e.get("event") == "ready", 120)["address"].rsplit("/", 1)[-1]
        for home, proc in homes.items()
    }
    h1, h2 = homes["h1"], homes["h2"]
    for proc in homes.values():
        assert wait_connected(proc, aux_id, {"direct"}, 120) == "direct"
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
    # the backbone was the other member: its metrics of those rounds count h1's samples alone
    metrics = aux.wait_for(
        lambda e: e.get("event") == "metrics" and e["epoch"] >= first["epoch"], 60
    )
    counted = {peer for peer, samples in metrics["contributions"].items() if samples > 0}
    assert counted == {ids["h1"]}, metrics
