"""A project whose model cannot fit this computer: a signed manifest describing 172 billion
parameters (687 GB of weights in fp32, about 2 TB with the optimizer's state) served by a real
coordinator. Joining it is refused before anything is written, in words that give the figures
(the parameters, the bytes, this computer's memory); the user's other projects and settings stay
as they were, and a normal project still attaches. A peer started on such a manifest anyway (an
engine's slot, ``barnraise peer``) is refused the same way before any model is built, as is an
expert server (an engine's slot, ``barnraise experts``) of a ``dmoe`` project whose experts are
too large, measured by the experts it would host; the dmoe demo's are still accepted.

Nothing here allocates the model: the estimate comes from the manifest's numbers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from core.api import AttachRequest, BadRequest
from core.cli.experts import experts_fit
from core.cli.main import build_parser, main
from core.engine.join.memory_fit import check_fit
from core.engine.join.resource_use import expert_parameters
from core.engine.projects import ProjectRunner, ProjectSlot, memory_now
from core.engine.store import EngineFile
from core.net import Identity
from core.project import load_any_manifest, load_dmoe_manifest
from core.worker.events import PeerEvent, PeerFailed
from tests.support.engine import Running
from tests.support.signed_project import PROJECT, project_text, serving

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "resources" / "demo" / "project.toml"
DMOE_DEMO = ROOT / "resources" / "dmoe-demo" / "project.toml"
HUGE = "huge-model"
HUGE_MODEL = {  # every width at the manifest's limit: 171,800,788,992 parameters
    "vocab_size = 512": "vocab_size = 1048576",
    "embedding_size = 32": "embedding_size = 65536",
    "hidden_size = 128": "hidden_size = 65536",
    "intermediate_size = 256": "intermediate_size = 65536",
    "max_position = 64": "max_position = 1048576",
}
FIGURES = ("172 billion parameters", "2.06 TB", "RAM")
"""What a refusal says: the model's size, the bytes its weights and optimizer state need, and this
computer's memory."""
HUGE_EXPERTS = "huge-experts"
HUGE_EXPERT = {  # the widest experts the manifest allows: 34,360,197,120 parameters each
    'name = "dmoe-demo"': f'name = "{HUGE_EXPERTS}"',
    "hidden = 64 ": "hidden = 65536 ",
}
EXPERT_FIGURES = ("experts it would host (4)", "137 billion parameters", "1.65 TB", "RAM")
"""What a refusal of the dmoe demo's grid of such experts says: a server hosts 4 of them (the
manifest's ``server.experts_per_server``)."""
QUICK = 10.0
"""Seconds a refusal may take at most: it reads numbers, it builds nothing."""


def huge_text(key: Identity | None) -> str:
    text = project_text(key, name=HUGE, description="Far too large for any volunteer.")
    for small, large in HUGE_MODEL.items():
        text = text.replace(small, large)
    return text


def huge_experts_text() -> str:
    text = DMOE_DEMO.read_text(encoding="utf-8")
    for small, large in HUGE_EXPERT.items():
        assert small in text, small
        text = text.replace(small, large)
    return text


def assert_figures(message: str, figures: Sequence[str] = FIGURES) -> None:
    for figure in figures:
        assert figure in message, message


class NoPeer:
    """Stands for the trainer or the expert server: building one is what must not happen (it would
    allocate the model or the experts)."""

    def __init__(self) -> None:
        self.built: list[Any] = []

    def __call__(self, settings: Any, on_event: Callable[[PeerEvent], None]) -> Any:
        self.built.append(settings)
        raise AssertionError("a peer was built for a model that cannot fit")


@pytest.fixture
def no_peer(monkeypatch: pytest.MonkeyPatch) -> NoPeer:
    from core.training.peer import project_peer  # loads torch: these tests only

    stand_in = NoPeer()
    monkeypatch.setattr(project_peer, "ProjectPeer", stand_in)
    return stand_in


@pytest.fixture
def no_experts(monkeypatch: pytest.MonkeyPatch) -> NoPeer:
    from core.moe.server import runtime  # loads torch: these tests only

    stand_in = NoPeer()
    monkeypatch.setattr(runtime, "ExpertHost", stand_in)
    return stand_in


async def test_joining_an_absurd_model_is_refused_with_the_figures(
    engine: Running, tmp_path: Path
) -> None:
    small_key, huge_key = Identity.generate(), Identity.generate()
    async with serving(tmp_path / "small", small_key, project_text(small_key)) as small:
        await engine.client.attach(AttachRequest(small.url, device="cpu"))
    settings = await engine.client.set_settings({"max_other_cpu_percent": 55})
    engine_file = engine.dirs.config / "engine.toml"
    kept = engine_file.read_text()

    async with serving(tmp_path / "huge", huge_key, huge_text(huge_key)) as huge:
        # the preview still says what the project is, and that it cannot train here
        preview = await engine.client.preview_project(huge.url)
        assert preview.uses.parameters == 171_800_788_992
        request = AttachRequest(huge.url, device="cpu", pinned_key=preview.project_key)
        with pytest.raises(BadRequest) as refused:
            await engine.client.attach(request)
    assert_figures(str(refused.value))
    assert "nothing was attached" in str(refused.value)
    assert any("cannot train here" in note for note in preview.uses.notes), preview.uses.notes

    # nothing lost, nothing added
    assert [p.name for p in (await engine.client.projects()).projects] == [PROJECT]
    assert await engine.client.settings() == settings
    assert engine_file.read_text() == kept
    assert not (engine.dirs.data / "projects" / HUGE).exists()
    assert [s.name for s in EngineFile(engine_file).load().projects] == [PROJECT]


async def test_the_demo_attaches_and_an_absurd_manifest_file_does_not(
    engine: Running, tmp_path: Path
) -> None:
    info = await engine.client.attach(AttachRequest(str(DEMO), device="cpu"))
    assert info.name == "barnraise-demo"
    path = tmp_path / "huge.toml"
    path.write_text(huge_text(None))
    with pytest.raises(BadRequest) as refused:
        await engine.client.attach(AttachRequest(str(path), device="cpu"))
    assert_figures(str(refused.value))
    assert [p.name for p in (await engine.client.projects()).projects] == ["barnraise-demo"]


@pytest.mark.parametrize(
    ("text", "figures"),
    [(huge_text(None), FIGURES), (huge_experts_text(), EXPERT_FIGURES)],
    ids=["model", "experts"],
)
async def test_a_slot_of_an_absurd_model_fails_to_start_without_building_it(
    tmp_path: Path, no_peer: NoPeer, no_experts: NoPeer, text: str, figures: Sequence[str]
) -> None:
    # a slot attached before its model was checked, or a file edited since it was attached
    path = tmp_path / "huge.toml"
    path.write_text(text)
    events: list[PeerEvent] = []
    runner = ProjectRunner(
        ProjectSlot(load_any_manifest(path).project.name, "", path, device="cpu"),
        work_dir=tmp_path / "work",
        identity=Identity.generate(),
        on_event=events.append,
        retry_after=3600.0,
    )
    runner.ensure_started()
    try:
        for _ in range(200):
            if runner.state == "failed":
                break
            await asyncio.sleep(0.05)
        assert no_peer.built == no_experts.built == []
        assert runner.state == "failed", runner.state
        assert runner.error is not None
        assert_figures(runner.error, figures)
        assert events == [PeerFailed(runner.error)]
    finally:
        await runner.stop()


def test_barnraise_peer_refuses_an_absurd_model(
    tmp_path: Path, no_peer: NoPeer, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "huge.toml"
    path.write_text(huge_text(None))
    argv = ["peer", "--manifest", str(path), "--device", "cpu", "--work-dir", str(tmp_path / "w")]
    code = main([*argv, "--host", "127.0.0.1", "--port", "0"])
    assert no_peer.built == []
    assert code == 1
    assert_figures(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("chosen", "figures"),
    [
        ([], EXPERT_FIGURES),
        (["--count", "16"], ("experts it would host (16)", "550 billion parameters", "6.6 TB")),
        (
            ["--uids", "ffn.[01].*"],
            ("experts it would host (8)", "275 billion parameters", "3.3 TB"),
        ),
    ],
    ids=["experts-per-server", "count", "uids"],
)
def test_barnraise_experts_refuses_experts_too_large_to_host(
    tmp_path: Path,
    no_experts: NoPeer,
    capsys: pytest.CaptureFixture[str],
    chosen: list[str],
    figures: Sequence[str],
) -> None:
    path = tmp_path / "huge-experts.toml"
    path.write_text(huge_experts_text())
    folder = tmp_path / "checkpoints"
    argv = ["experts", "--manifest", str(path), "--device", "cpu", "--checkpoints", str(folder)]
    started = time.monotonic()
    code = main([*argv, "--host", "127.0.0.1", "--port", "0", *chosen])
    assert time.monotonic() - started < QUICK
    assert no_experts.built == []  # nothing built, nothing listening
    assert code == 1
    assert_figures(capsys.readouterr().err, (*figures, "RAM"))
    assert not folder.exists()


@pytest.mark.parametrize(
    ("chosen", "hosted"), [([], 4), (["--count", "1"], 1), (["--uids", "ffn.*"], 16)]
)
def test_the_dmoe_demo_s_experts_are_accepted(chosen: list[str], hosted: int) -> None:
    manifest = load_dmoe_manifest(DMOE_DEMO)
    args = build_parser("experts").parse_args(["experts", "--manifest", str(DMOE_DEMO), *chosen])
    fit = experts_fit(args, manifest)
    assert (fit.fits, fit.experts) == (True, hosted)
    assert fit.parameters == hosted * expert_parameters(manifest)
    # the engine's server hosts the manifest's server.experts_per_server
    assert check_fit(manifest, memory_now("cpu")).experts == manifest.server.experts_per_server
