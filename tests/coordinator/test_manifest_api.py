"""``GET /manifest``: the coordinator serves its manifest file signed by the project key, a new
version after each change of the file, never a change that does not validate or that names another
project or key, and version numbers that never go back, across restarts too."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from core.coordinator import CoordinatorService
from core.net import Identity
from core.project import parse_manifest
from core.project.signed import SignedManifest, parse_envelope
from tests.support.leaks import assert_no_leaks, open_fd_count
from tests.support.signed_project import SCRYPT_N, project_text, rewrite, serving


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    baseline = open_fd_count()
    async with aiohttp.ClientSession() as session:
        yield session
    await assert_no_leaks(baseline)


async def fetch(http: aiohttp.ClientSession, service: CoordinatorService) -> SignedManifest:
    async with http.get(service.url + "/manifest") as response:
        assert response.status == 200, await response.text()
        assert response.content_type == "application/json"
        assert response.headers["Cache-Control"] == "no-cache"
        return parse_envelope(await response.read())


async def test_the_manifest_is_served_signed_and_a_change_is_a_new_version(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    key = Identity.generate()
    first = project_text(key)
    async with serving(tmp_path, key, first) as service:
        served = await fetch(http, service)
        assert (served.project, served.version, served.text) == ("url-test", 1, first)
        assert served.check(key.peer_id).network.initial_peers == ()
        assert (await fetch(http, service)).version == 1  # asked again: the same version

        peer = f"/ip4/10.0.0.1/tcp/31337/p2p/{key.peer_id}"
        second = project_text(key, peers=[peer])
        rewrite(tmp_path / "project.toml", second)
        served = await fetch(http, service)
        assert (served.version, served.text) == (2, second)
        assert served.check(key.peer_id).network.initial_peers == (peer,)

        rewrite(tmp_path / "project.toml", second)  # touched, not changed: no new version
        assert (await fetch(http, service)).version == 2
        rewrite(tmp_path / "project.toml", first)  # undone: what is served now is newer
        assert ((await fetch(http, service)).version, service.store.manifests.count()) == (3, 3)


@pytest.mark.parametrize(
    ("broken", "words"),
    [
        ("[project\nname = ", "invalid TOML"),
        (project_text(None).replace("hidden_size = 128", "hidden_size = 130"), "hidden_size"),
        (project_text(None, name="someone-else"), "project 'someone-else'"),
        (project_text(Identity.generate()), "names project key"),
        # valid on its own, but volunteers who joined after it could not average with the swarm
        (project_text(None, hidden_size=256), "changes model.hidden_size from 128 to 256"),
    ],
    ids=["toml", "invalid", "other-project", "other-key", "breaks-training"],
)
async def test_a_change_that_does_not_validate_is_logged_and_not_served(
    tmp_path: Path,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    broken: str,
    words: str,
) -> None:
    key = Identity.generate()
    good = project_text(key)
    async with serving(tmp_path, key, good) as service:
        assert (await fetch(http, service)).version == 1
        with caplog.at_level(logging.ERROR, logger="core.coordinator.manifest_route"):
            rewrite(tmp_path / "project.toml", broken)
            for _ in range(3):  # asked again and again: logged once
                served = await fetch(http, service)
                assert (served.version, served.text) == (1, good)
        problems = [r.getMessage() for r in caplog.records]
        assert len(problems) == 1, problems
        assert words in problems[0]
        assert "version 1 stays served" in problems[0]

        fixed = project_text(key, lr=0.02)
        rewrite(tmp_path / "project.toml", fixed)  # the organizer fixes it: served at once
        served = await fetch(http, service)
        assert (served.version, served.text) == (2, fixed)


async def test_versions_survive_a_restart_and_never_go_back(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    key = Identity.generate()
    async with serving(tmp_path, key, project_text(key)) as service:
        rewrite(tmp_path / "project.toml", project_text(key, lr=0.02))
        assert (await fetch(http, service)).version == 1  # the first look saw the second text
        rewrite(tmp_path / "project.toml", project_text(key, lr=0.03))
        assert (await fetch(http, service)).version == 2
    async with serving(tmp_path, key, project_text(key, lr=0.03)) as service:
        same = await fetch(http, service)
        assert (same.version, same.check(key.peer_id).training.lr) == (2, 0.03)
    # changed while the coordinator was down, and broken when it starts: the last good one stays
    async with serving(tmp_path, key, project_text(key, lr=0.04)) as service:
        assert (await fetch(http, service)).version == 3
        rewrite(tmp_path / "project.toml", "not a manifest = [")
    async with serving(tmp_path, key, project_text(key, lr=0.04)) as service:
        rewrite(tmp_path / "project.toml", "not a manifest = [")
        served = await fetch(http, service)
        assert (served.version, served.check(key.peer_id).training.lr) == (3, 0.04)


async def test_a_new_project_key_signs_a_new_version(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """The organizer replaced the key file: what an earlier run signed is not served again."""
    old, new = Identity.generate(), Identity.generate()
    async with serving(tmp_path, old, project_text(None)) as service:
        assert (await fetch(http, service)).project_key == old.peer_id
    async with serving(tmp_path, new, project_text(None)) as service:
        served = await fetch(http, service)
        assert (served.version, served.project_key) == (2, new.peer_id)


async def test_without_a_manifest_file_there_is_nothing_to_serve(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    key = Identity.generate()
    service = CoordinatorService(
        parse_manifest(project_text(key)), tmp_path / "c.db", key, scrypt_n=SCRYPT_N
    )
    await service.start("127.0.0.1", 0)
    try:
        async with http.get(service.url + "/manifest") as response:
            assert response.status == 404
            assert "without a manifest file" in (await response.json())["error"]
    finally:
        await service.close()


async def test_a_file_broken_from_the_start_is_a_clear_503(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    key = Identity.generate()
    async with serving(tmp_path, key, project_text(key)) as service:
        rewrite(tmp_path / "project.toml", "[project]\nname = 'Bad Name'\n")
        async with http.get(service.url + "/manifest") as response:
            assert response.status == 503
            body = await response.json()
        assert "its organizer must fix the manifest file" in body["error"]
        assert "project.name" in body["error"]


async def test_odd_requests_for_the_manifest_get_plain_answers(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    key = Identity.generate()
    async with serving(tmp_path, key, project_text(key)) as service:
        async with http.post(service.url + "/manifest", data=b"x" * (4 * 1024 * 1024)) as response:
            assert response.status == 405
            assert (await response.json())["code"] == "method_not_allowed"
        async with http.get(service.url + "/manifest?version=0&" + "a=b&" * 500) as response:
            assert response.status == 200  # the query is not read: the latest is all there is
            assert parse_envelope(await response.read()).version == 1
        async with http.head(service.url + "/manifest") as response:
            assert response.status == 200


async def test_the_project_page_describes_the_manifest_as_served_now(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    # the organizer edits the description while the coordinator runs: volunteers' engines get the
    # new version, and the page must say the same, not what the file said at the start
    key = Identity.generate()
    async with serving(tmp_path, key, project_text(key, description="First words.")) as service:
        async with http.get(service.url + "/") as response:
            assert "First words." in await response.text()
        rewrite(tmp_path / "project.toml", project_text(key, description="Better <words>."))
        async with http.get(service.url + "/") as response:
            page = await response.text()
        assert "Better &lt;words&gt;." in page
        assert "First words." not in page
        # a broken edit is not served, and the page keeps the last version that was
        rewrite(tmp_path / "project.toml", "[project\n")
        async with http.get(service.url + "/") as response:
            assert "Better &lt;words&gt;." in await response.text()
