"""A project whose model cannot fit this computer: a signed manifest describing 172 billion
parameters (687 GB of weights in fp32, about 2 TB with the optimizer's state) served by a real
coordinator. Joining it is refused before anything is written, in words that give the figures
(the parameters, the bytes, this computer's memory); the user's other projects and settings stay
as they were, and a normal project still attaches. A peer started on such a manifest anyway (an
engine's slot, ``barnraise peer``) is refused the same way before any model is built.

Nothing here allocates the model: the estimate comes from the manifest's numbers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.api import AttachRequest, BadRequest
from core.cli.main import main
from core.engine.projects import ProjectRunner, ProjectSlot
from core.engine.store import EngineFile
from core.net import Identity
from core.worker.events import PeerEvent, PeerFailed
from tests.support.engine import Running
from tests.support.signed_project import PROJECT, project_text, serving

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "resources" / "demo" / "project.toml"
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


def huge_text(key: Identity | None) -> str:
    text = project_text(key, name=HUGE, description="Far too large for any volunteer.")
    for small, large in HUGE_MODEL.items():
        text = text.replace(small, large)
    return text


def assert_figures(message: str) -> None:
    for figure in FIGURES:
        assert figure in message, message


class NoPeer:
    """Stands for the trainer: building one is what must not happen (it would allocate the model)."""

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


async def test_a_slot_of_an_absurd_model_fails_to_start_without_building_it(
    tmp_path: Path, no_peer: NoPeer
) -> None:
    # a slot attached before its model was checked, or a file edited since it was attached
    path = tmp_path / "huge.toml"
    path.write_text(huge_text(None))
    events: list[PeerEvent] = []
    runner = ProjectRunner(
        ProjectSlot(HUGE, "", path, device="cpu"),
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
        assert no_peer.built == []
        assert runner.state == "failed", runner.state
        assert runner.error is not None
        assert_figures(runner.error)
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
