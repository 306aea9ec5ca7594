"""A light bundle's engine before torch is fetched: a project says why it waits, and starts once
torch is there (looked up, never imported, until then)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from core.engine.projects import TORCH_MISSING, ProjectRunner, ProjectSlot
from core.trust.identity import Identity
from core.worker.events import PeerEvent, PeerFailed


def test_without_torch_the_project_fails_in_words_and_tries_again_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "torch" else real_find_spec(name, *a),
    )
    events: list[PeerEvent] = []
    runner = ProjectRunner(
        ProjectSlot("demo", "", tmp_path / "project.toml"),
        work_dir=tmp_path,
        identity=Identity.generate(),
        on_event=events.append,
        retry_after=3600.0,
    )
    runner.ensure_started()
    assert runner.state == "failed"
    assert runner.error == TORCH_MISSING
    assert events == [PeerFailed(TORCH_MISSING)]
    runner.ensure_started()  # within retry_after: not looked for again
    assert len(events) == 1
