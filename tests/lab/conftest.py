"""Lab fixtures: ``make_lab(nat1, nat2, same_lan)`` builds labs that are torn down after the test
whatever its outcome; ``nat_lab`` is one lab, parametrized indirectly with ``(nat1, nat2)`` or
``(nat1, nat2, same_lan)``. Both skip, with the reason, where no lab can be built."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core.swarm.demo_data import DEMO_MANIFEST
from tests.lab.natlab import NatKind, NatLab, lab_namespaces, lab_unavailable, sweep_stale

MakeLab = Callable[..., NatLab]


@pytest.fixture(scope="session")
def lab_support() -> str | None:
    """Why no lab can be built here (None: it can); probed once, and crashed runs' leftovers are
    swept once, per session."""
    reason = lab_unavailable()
    if reason is None:
        sweep_stale()
    return reason


@pytest.fixture
def make_lab(lab_support: str | None) -> Iterator[MakeLab]:
    if lab_support is not None:
        pytest.skip(lab_support)
    labs: list[NatLab] = []

    def make(
        nat1: NatKind = "cone",
        nat2: NatKind = "cone",
        same_lan: bool = False,
        *,
        udp_timeout: int | None = None,
    ) -> NatLab:
        lab = NatLab(nat1, nat2, same_lan, udp_timeout=udp_timeout)
        labs.append(lab)
        lab.setup()
        return lab

    yield make
    errors: list[BaseException] = []
    for lab in labs:
        try:
            lab.teardown()
        except Exception as exc:  # the other labs still go
            errors.append(exc)
    if errors:
        raise errors[0]
    left = [name for lab in labs for name in lab_namespaces() if name.startswith(lab.prefix)]
    assert not left, f"lab namespaces survive teardown: {left}"


@pytest.fixture
def nat_lab(request: pytest.FixtureRequest, make_lab: MakeLab) -> NatLab:
    """One lab; ``@pytest.mark.parametrize("nat_lab", [("cone", "symmetric")], indirect=True)``
    picks its NAT kinds (cone/cone when not parametrized)."""
    param = getattr(request, "param", ("cone", "cone"))
    return make_lab(*param)


@pytest.fixture(scope="session")
def project(tmp_path_factory: pytest.TempPathFactory, demo_data: Path) -> Path:
    """The demo project with its data beside the manifest (the homes read it as local files), a
    smaller target batch so that epochs come quickly."""
    root = tmp_path_factory.mktemp("lab-project")
    for name in ("shards", "tokenizer.json"):
        (root / name).symlink_to(demo_data / name)
    text = re.sub(r"target_batch_size = \d+", "target_batch_size = 64", DEMO_MANIFEST.read_text())
    (root / "project.toml").write_text(text)
    return root / "project.toml"
