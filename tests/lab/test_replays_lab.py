"""The backbone replays diloco volunteers' rounds across a cone and a symmetric NAT.

The demo project in diloco mode with ``overlap = false`` and the default ``work_checks``: rounds are
replayed (``core.training.diloco.checks``). A backbone on the public host with default arguments
and a volunteer's ``barnraise peer`` in each home. The replay's calls (receipt, every batch, blocks
of work) go from the backbone to each home over the connection the home dialled. Asserted: each
volunteer's first replayed round (a newcomer's is always replayed) passes, and nobody is caught.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from core.project import load_manifest
from core.swarm.demo_data import DEMO_MANIFEST
from tests.lab.conftest import MakeLab
from tests.lab.procs import backbone_and_homes

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(420)]

ROUND_SECONDS = 15
"""As the diloco lab test's: dozens of inner steps a round on a loaded machine, an exchange that
ends within the round."""


@pytest.fixture(scope="module")
def replayed_project(tmp_path_factory: pytest.TempPathFactory, demo_data: Path) -> Path:
    root = tmp_path_factory.mktemp("lab-replays-project")
    for name in ("shards", "tokenizer.json"):
        (root / name).symlink_to(demo_data / name)
    text, trained = re.subn(
        r"^\[training\]\n",
        f'[training]\nmode = "diloco"\nround_seconds = {ROUND_SECONDS}\noverlap = false\n',
        DEMO_MANIFEST.read_text(),
        flags=re.MULTILINE,
    )
    assert trained == 1, "the demo manifest's layout changed"
    path = root / "project.toml"
    path.write_text(text)
    manifest = load_manifest(path)
    assert (manifest.training.mode, manifest.training.overlap) == ("diloco", False)
    assert manifest.training.work_checks > 0  # the default: rounds are replayed
    return path


def checks(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def test_the_backbone_replays_rounds_of_volunteers_behind_nats(
    make_lab: MakeLab, replayed_project: Path, tmp_path: Path
) -> None:
    lab = make_lab("cone", "symmetric")
    _, _, named = backbone_and_homes(lab, replayed_project, tmp_path)
    ids = set(named.values())

    log = tmp_path / "aux" / "checks.jsonl"
    deadline = time.monotonic() + 12 * ROUND_SECONDS
    while time.monotonic() < deadline:
        found = checks(log)
        assert not [c for c in found if c["verdict"] == "caught"], found
        if {c["peer"] for c in found if c["verdict"] == "passed"} >= ids:
            break
        time.sleep(1.0)
    found = checks(log)
    passed = [c for c in found if c["verdict"] == "passed"]
    assert {c["peer"] for c in passed} >= ids, found
    # a replay that passed fetched the round's batches and work, and replayed its steps
    assert all(int(c["sampled"]) > 0 and int(c["received"]) > 0 for c in passed), passed
