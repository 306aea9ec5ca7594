"""The FakeEngine answers project URLs as the engine does: previews of the URLs a test serves
(the key trusted by the URL, on first use, or pinned), a key mismatch refused, an unknown URL
unreachable, the attach by URL with its key and version, and signed updates told as events."""

from __future__ import annotations

import dataclasses

import pytest

from core.api import (
    AttachRequest,
    BadRequest,
    Conflict,
    CoordinatorUnreachable,
    ManifestUpdated,
    NotFound,
    ProjectPreview,
)
from core.api.testing import FakeEngine
from core.api.testing.sample_data import REMOTE_PREVIEW

OTHER_KEY = "12D3KooWNoqBgYEX9DvMUKQt9xSptgLvZNi3XLpuBDb8Pt9dnaDG"


def served(url: str = "https://coord.example.org", **changes: object) -> ProjectPreview:
    return dataclasses.replace(REMOTE_PREVIEW, url=url, name="served-project", **changes)


async def test_previews_answer_the_served_urls_with_how_the_key_is_trusted() -> None:
    fake = FakeEngine("fresh")
    fake.serve_project(served())
    first = await fake.preview_project("HTTPS://coord.example.org/")
    assert (first.name, first.url, first.key_source) == (
        "served-project",
        "https://coord.example.org",
        "first-use",
    )
    named = await fake.preview_project(f"https://coord.example.org/#key={first.project_key}")
    assert named.key_source == "url"
    with pytest.raises(BadRequest, match="signed by project key"):
        await fake.preview_project(f"https://coord.example.org/#key={OTHER_KEY}")
    with pytest.raises(CoordinatorUnreachable, match="does not answer"):
        await fake.preview_project("https://nobody.example.org")
    with pytest.raises(BadRequest, match="not a project URL"):
        await fake.preview_project("coord.example.org")
    sample = await fake.preview_project(REMOTE_PREVIEW.url)  # served by default (--preview)
    assert sample.mode == "moderated"
    assert sample.uses.parameters > 0
    assert fake.calls.count("preview_project") == 6


async def test_attaching_by_url_pins_the_key_and_updates_are_told() -> None:
    fake = FakeEngine("fresh")
    fake.serve_project(served())
    with pytest.raises(BadRequest, match="signed by project key"):
        await fake.attach(AttachRequest("https://coord.example.org", pinned_key=OTHER_KEY))
    preview = await fake.preview_project("https://coord.example.org")
    info = await fake.attach(
        AttachRequest("https://coord.example.org", pinned_key=preview.project_key)
    )
    assert (info.source_url, info.project_key, info.manifest_version, info.active) == (
        "https://coord.example.org",
        preview.project_key,
        preview.version,
        True,
    )
    assert (await fake.preview_project("https://coord.example.org")).key_source == "pinned"
    with pytest.raises(Conflict, match="already attached"):
        await fake.attach(AttachRequest("https://coord.example.org"))
    assert (await fake.account()).moderated  # the served project is moderated: log in

    fake.update_manifest("served-project", 4, refused="the update changes model.hidden_size")
    checked = await fake.check_project("served-project")
    assert (checked.manifest_version, checked.update_refused) == (
        3,
        "the update changes model.hidden_size",
    )
    fake.update_manifest("served-project", 5)
    checked = await fake.check_project("served-project")
    assert (checked.manifest_version, checked.update_refused) == (5, None)
    told = [e.data for e in fake.recent if isinstance(e.data, ManifestUpdated)]
    assert [(t.version, t.applied) for t in told] == [(4, False), (5, True)]
    with pytest.raises(NotFound):
        await fake.check_project("never-attached")
