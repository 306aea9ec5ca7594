"""Fetching a project's signed manifest from its project URL, checking it, and keeping a copy.

``fetch_manifest`` GETs ``<project URL>/manifest`` (``core.coordinator.manifest_route``) with a
size cap (``MAX_ENVELOPE_BYTES``: a larger answer is refused after its header, or as soon as it
passes the cap, never read whole) and timeouts, through the system's certificates and proxy
settings (``core.util.web_client``). It checks the envelope (``core.project.signed``): the
signature, the manifest inside, and the key, against the first of

1. the key the URL's ``#key=`` fragment names,
2. the key pinned for this URL before (the user accepted it in a preview, or an attached
   project's slot holds it),
3. nothing: the first use pins the key it was signed by (trust on first use, as SSH).

A key named by the URL that differs from the pinned one is refused too: one of them is not the
project's. ``save_copy`` writes the manifest's text atomically into the engine's own folder (the
engine's copy, which the peer reads), so a crash leaves the old copy or the new, never half.

Data named by relative paths (``shards/a.jsonl``) or local files in a manifest served by URL
mean something only on the organizer's disk: they are resolved against the data base URL the
user gave when attaching (``AttachRequest.data_base``), and without one such a manifest is
refused (``data_problem``), as is an update that brings such paths in. The coordinator's URL is
no shard server, so relative paths are never resolved against the project URL.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from core.api.project_url import ProjectUrl
from core.api.schema import KeySource
from core.engine.errors import EngineError
from core.project import AnyManifest, DmoeManifest
from core.project.signed import (
    MAX_ENVELOPE_BYTES,
    SignedManifest,
    SignedManifestError,
    parse_envelope,
)
from core.trust.errors import PeerIdError
from core.trust.peer_id import PeerID
from core.util.web_client import client_session, connection_problem

CONNECT_TIMEOUT = 10.0
"""Seconds to reach the coordinator."""
READ_TIMEOUT = 30.0
"""Seconds the whole answer may take once connected."""
MANIFEST_FILE = "manifest.toml"
"""The engine's copy of a project's manifest, in the project's own folder (``EngineConfig``)."""
_URL = re.compile(r"https?://", re.IGNORECASE)


class ManifestUnreachable(EngineError):
    """The project URL does not answer, or answers with an HTTP error (the message says which)."""


class ManifestRefused(EngineError):
    """The project URL answered, but with a manifest that must not be used: malformed, signed by
    another key than the one trusted, a bad signature, an invalid manifest (the message says)."""


@dataclass(frozen=True)
class FetchedManifest:
    url: ProjectUrl
    signed: SignedManifest
    manifest: AnyManifest
    key_source: KeySource

    @property
    def project_key(self) -> str:
        return str(self.signed.project_key)


def trusted_key(url: ProjectUrl, pinned: str | None) -> tuple[PeerID | None, KeySource]:
    """The key a fetch from ``url`` must be signed by, and why it is trusted (see the module)."""
    if url.key is not None and pinned is not None and url.key != pinned:
        raise ManifestRefused(
            f"the URL names project key {url.key}, but this project's manifest was trusted as "
            f"signed by {pinned}: one of them is not the project's; nothing was changed"
        )
    named = url.key or pinned
    if named is None:
        return None, "first-use"
    try:
        key = PeerID.from_string(named)
    except PeerIdError as exc:
        raise ManifestRefused(f"the project key {named[:80]!r} is not a PeerID: {exc}") from None
    return key, "url" if url.key is not None else "pinned"


async def fetch_manifest(
    url: ProjectUrl,
    *,
    pinned: str | None = None,
    connect_timeout: float = CONNECT_TIMEOUT,
    read_timeout: float = READ_TIMEOUT,
) -> FetchedManifest:
    """The signed manifest served at ``url``, checked (see the module docstring);
    ``ManifestUnreachable`` or ``ManifestRefused`` saying why not."""
    expected, source = trusted_key(url, pinned)
    raw = await _get(url.manifest_url, connect_timeout, read_timeout)
    try:
        signed = parse_envelope(raw, source=url.manifest_url)
        manifest = signed.check(expected, source=url.url)
    except SignedManifestError as exc:
        raise ManifestRefused(str(exc)) from None
    return FetchedManifest(url, signed, manifest, source)


async def _get(where: str, connect_timeout: float, read_timeout: float) -> bytes:
    timeout = aiohttp.ClientTimeout(
        total=connect_timeout + read_timeout, sock_connect=connect_timeout
    )
    try:
        async with (
            client_session(timeout, url=where) as session,
            session.get(where, allow_redirects=True, max_redirects=5) as response,
        ):
            if response.status != 200:
                said = await _said(response)
                raise ManifestUnreachable(_status_words(where, response.status, said))
            if (response.content_length or 0) > MAX_ENVELOPE_BYTES:
                raise ManifestRefused(_too_large(where))
            body = bytearray()
            async for chunk in response.content.iter_chunked(64 * 1024):
                body += chunk
                if len(body) > MAX_ENVELOPE_BYTES:
                    raise ManifestRefused(_too_large(where))
            return bytes(body)
    except TimeoutError:  # before OSError, of which it is one (aiohttp's are too)
        raise ManifestUnreachable(
            f"the project at {where} did not answer within {connect_timeout + read_timeout:g} s; "
            "try again later"
        ) from None
    except (aiohttp.ClientError, OSError) as exc:
        raise ManifestUnreachable(
            f"the project at {where} does not answer: {connection_problem(exc)}; check the URL "
            "and your connection, or try again later"
        ) from None


async def _said(response: aiohttp.ClientResponse) -> str | None:
    """The coordinator's own words in an error answer (``{"error": ...}``), if it sent some."""
    try:
        raw = await response.content.read(4096)
        error = json.loads(raw.decode("utf-8")).get("error")
    except (ValueError, UnicodeDecodeError, AttributeError, aiohttp.ClientError):
        return None
    return error[:300] if isinstance(error, str) else None


def _status_words(where: str, status: int, said: str | None) -> str:
    if status == 404:
        return f"no Barnraise project is served at {where} (HTTP 404): check the project URL" + (
            f" ({said})" if said else ""
        )
    return f"the project at {where} answered HTTP {status}" + (f": {said}" if said else "")


def _too_large(where: str) -> str:
    return (
        f"the answer of {where} is larger than a signed manifest can be "
        f"({MAX_ENVELOPE_BYTES:,} bytes): it was not read"
    )


def data_problem(manifest: AnyManifest, data_base: str | None) -> str | None:
    """Why the data ``manifest`` names cannot be reached from this computer when it was served by
    URL (paths on the organizer's disk, with no data base URL to resolve them), or None."""
    if isinstance(manifest, DmoeManifest):
        return None  # its dataset ships with Barnraise
    local = [u for s in manifest.data.sources for u in s.urls if not _URL.match(u)]
    if not _URL.match(manifest.data.tokenizer):
        local.append(manifest.data.tokenizer)
    if not local:
        return None
    remote_base = data_base is not None and _URL.match(data_base) is not None
    relative = [u for u in local if not u.startswith(("/", "file:", "\\")) and ":" not in u[:3]]
    if remote_base and len(relative) == len(local):
        return None
    shown = ", ".join(local[:3]) + (", ..." if len(local) > 3 else "")
    return (
        f"its data is named by paths on the organizer's computer ({shown}), which this "
        "computer cannot read; the organizer must list http(s):// URLs in [[data.sources]] and "
        "data.tokenizer (or attach with a data base URL that serves these paths)"
    )


def save_copy(path: Path, text: str) -> None:
    """Write ``text`` as the engine's copy of a project's manifest at ``path``, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with partial.open("w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
