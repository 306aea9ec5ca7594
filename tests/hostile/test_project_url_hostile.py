"""A project URL that answers with something hostile: the engine's fetch of the signed manifest
(``core.engine.join.remote_manifest``) refuses each in plain words, quickly, without reading an
oversized answer whole, and an update that goes back in version or comes from another key is
never taken. Servers here are aiohttp apps on 127.0.0.1 that misbehave on purpose."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from core.api import BadRequest
from core.api.project_url import ProjectUrl
from core.engine.join.joining import look_for_update
from core.engine.join.remote_manifest import (
    ManifestRefused,
    ManifestUnreachable,
    fetch_manifest,
    save_copy,
)
from core.engine.projects import ProjectSlot
from core.net import Identity
from core.project.signed import MAX_ENVELOPE_BYTES, sign_manifest
from core.util.blocking import BlockingPool
from tests.support.leaks import assert_no_leaks, open_fd_count
from tests.support.signed_project import PROJECT, project_text

KEY = Identity.from_seed(bytes(range(32)))
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclasses.dataclass
class Sent:
    bytes: int = 0
    finished: bool = False


@pytest.fixture
async def hostile() -> AsyncIterator[Callable[[Handler], Awaitable[ProjectUrl]]]:
    """Start a server whose ``/manifest`` is the given handler; its project URL."""
    baseline = open_fd_count()
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> ProjectUrl:
        app = web.Application()
        app.router.add_get("/manifest", handler)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return ProjectUrl.parse(f"http://127.0.0.1:{port}")

    yield start
    for runner in runners:
        await runner.cleanup()
    await assert_no_leaks(baseline)


def envelope(text: str, *, version: int = 1, key: Identity = KEY) -> bytes:
    return sign_manifest(key, PROJECT, text, version=version, issued=time.time()).to_bytes()


def answering(body: bytes, *, status: int = 200, kind: str = "application/json") -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(body=body, status=status, content_type=kind)

    return handler


def streaming(total: int, sent: Sent, *, declare: bool) -> Handler:
    """Sends ``total`` bytes of JSON-looking text in 64 KiB writes, counting what got out."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.content_type = "application/json"
        if declare:
            response.content_length = total
        await response.prepare(request)
        chunk = b" " * 65536
        try:
            while sent.bytes < total:
                await response.write(chunk)
                sent.bytes += len(chunk)
            sent.finished = True
        except (ConnectionError, asyncio.CancelledError):
            pass
        return response

    return handler


async def test_a_signature_that_does_not_match_is_refused(
    hostile: Callable[..., Awaitable[ProjectUrl]],
) -> None:
    signed = json.loads(envelope(project_text(KEY)))
    signed["manifest"] = signed["manifest"].replace("lr = 0.01", "lr = 9.0")  # altered on the way
    url = await hostile(answering(json.dumps(signed).encode()))
    with pytest.raises(ManifestRefused, match="does not match its signature"):
        await fetch_manifest(url)


async def test_a_manifest_from_another_key_than_the_url_names_is_refused(
    hostile: Callable[..., Awaitable[ProjectUrl]],
) -> None:
    usurper = Identity.generate()
    url = await hostile(answering(envelope(project_text(None), key=usurper)))
    named = dataclasses.replace(url, key=str(KEY.peer_id))
    with pytest.raises(ManifestRefused, match=f"signed by project key {usurper.peer_id}"):
        await fetch_manifest(named)
    with pytest.raises(ManifestRefused, match="one of them is not the project's"):
        await fetch_manifest(named, pinned=str(usurper.peer_id))


@pytest.mark.parametrize("declare", [True, False], ids=["content-length", "chunked"])
async def test_an_oversized_answer_is_refused_without_reading_it_all(
    hostile: Callable[..., Awaitable[ProjectUrl]], declare: bool
) -> None:
    sent = Sent()
    total = 64 * 1024 * 1024
    url = await hostile(streaming(total, sent, declare=declare))
    started = time.monotonic()
    with pytest.raises(ManifestRefused, match="larger than a signed manifest can be"):
        await fetch_manifest(url)
    assert time.monotonic() - started < 10.0
    assert not sent.finished
    assert sent.bytes < total / 4  # the connection was dropped long before the end
    if declare:
        assert sent.bytes < 2 * MAX_ENVELOPE_BYTES


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"<!doctype html><title>Sign in to the Wi-Fi</title>", "not JSON"),
        (b'{"format": "some-other-thing"}', "not a signed manifest"),
        (b'{"error": "no"}', "not a signed manifest"),
        (b"[]", "not an object"),
    ],
    ids=["html", "format", "object", "list"],
)
async def test_an_answer_that_is_no_signed_manifest_is_refused(
    hostile: Callable[..., Awaitable[ProjectUrl]], body: bytes, words: str
) -> None:
    url = await hostile(answering(body, kind="text/html"))
    with pytest.raises(ManifestRefused, match=words):
        await fetch_manifest(url)


async def test_error_pages_and_stalls_are_unreachable_in_words(
    hostile: Callable[..., Awaitable[ProjectUrl]],
) -> None:
    big_error = json.dumps({"error": "x" * 10_000_000}).encode()
    url = await hostile(answering(big_error, status=500))
    with pytest.raises(ManifestUnreachable, match="answered HTTP 500"):
        await fetch_manifest(url)
    missing = await hostile(answering(b'{"error": "no such endpoint"}', status=404))
    with pytest.raises(ManifestUnreachable, match="no Barnraise project is served"):
        await fetch_manifest(missing)

    release = asyncio.Event()

    async def stall(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b'{"format": ')
        await release.wait()  # a server that never finishes (released when the test ends)
        return response

    slow = await hostile(stall)
    started = time.monotonic()
    try:
        with pytest.raises(ManifestUnreachable, match="did not answer within"):
            await fetch_manifest(slow, connect_timeout=0.5, read_timeout=0.5)
    finally:
        release.set()
    assert time.monotonic() - started < 5.0

    async def loop(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/manifest")

    circular = await hostile(loop)
    with pytest.raises(ManifestUnreachable, match="does not answer"):
        await fetch_manifest(circular)


async def test_an_update_that_goes_back_or_changes_key_is_never_taken(
    hostile: Callable[..., Awaitable[ProjectUrl]], tmp_path: Path
) -> None:
    text = project_text(KEY)
    served = {"body": envelope(project_text(KEY, lr=0.02), version=2)}

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(body=served["body"], content_type="application/json")

    url = await hostile(handler)
    copy = tmp_path / "manifest.toml"
    save_copy(copy, text)
    slot = dataclasses.replace(
        ProjectSlot.from_manifest(copy),
        source_url=url.url,
        project_key=str(KEY.peer_id),
        manifest_version=3,
    )
    pool = BlockingPool("test")
    try:
        older = await look_for_update(slot, pool)
        assert (older.outcome, older.version) == ("refused", 2)
        assert "version 2, older than version 3 held here" in older.reason
        served["body"] = envelope(project_text(KEY, lr=0.05), version=3)
        same_number = await look_for_update(slot, pool)
        assert "version 3 again, with other content" in same_number.reason
        served["body"] = envelope(project_text(None, lr=0.05), version=9, key=Identity.generate())
        other_key = await look_for_update(slot, pool)
        assert other_key.outcome == "refused"
        assert "the key you trusted" in other_key.reason
        served["body"] = envelope(text, version=3)
        assert (await look_for_update(slot, pool)).outcome == "same"
    finally:
        pool.close()
    assert copy.read_text() == text  # nothing was ever written over the engine's copy


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://user:pw@coord.example.org", "no user name or password"),
        ("https://coord.example.org/?x=1", "no query"),
        ("https://coord.example.org/#key=not-a-key", "is not a PeerID"),
        ("https://", "names no host"),
        ("https://coord.example.org:99999", "not a project URL"),
        ("https://coord example.org", "spaces"),
        ("https://" + "a" * 5000 + ".org", "longer than"),
        ("javascript:alert(1)", "not a project URL"),
    ],
)
def test_malformed_project_urls_are_refused_before_anything_is_fetched(
    url: str, words: str
) -> None:
    with pytest.raises(BadRequest, match=words):
        ProjectUrl.parse(url)


def test_project_urls_are_normalised() -> None:
    parsed = ProjectUrl.parse(f"  HTTPS://Coord.Example.ORG:443/albert/#key={KEY.peer_id}  ")
    assert (parsed.url, parsed.key) == ("https://coord.example.org/albert", str(KEY.peer_id))
    assert parsed.manifest_url == "https://coord.example.org/albert/manifest"
    assert ProjectUrl.parse("http://[::1]:8470/").url == "http://[::1]:8470"
