"""``GET /manifest``: the project's manifest, versioned and signed by the project key.

The project URL (the coordinator's public base URL) is what volunteers paste to join; their engine
fetches ``<project URL>/manifest``, checks the envelope's signature against the key the URL or an
earlier fetch pinned (``core.project.signed``), and polls it for updates.

The coordinator serves the manifest file it was started with, as it is now: on each request it
looks at the file's modification time, size and inode (a ``stat``, cheap), and only when one of
them changed reads the file again. A text that validates (``parse_any_manifest``), names the same
project and no other project key, and differs from the latest served gets the next version number
(``manifest_versions``, kept in the database so that numbers never go back, across restarts too)
and is signed once. A changed file that does not validate, that names another project or key, or
that changes what the running swarm trains (``core.project.compatibility``: the model, the
tokenizer, a dmoe grid), is logged once and not served: the previous version stays. Without a
manifest file (a service built from a manifest in memory) the route answers 404.

The coordinator's own behaviour (open or moderated, sign-up, pass lifetimes) keeps following the
manifest it was started with; restart it to apply such a change there. Volunteers' engines pick up
what they may from each new version (new peers, data sources, training numbers) and refuse changes
that would break training.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from aiohttp import web

from core.coordinator.errors import NotFound
from core.coordinator.manifest_versions import StoredManifest
from core.coordinator.store import CoordinatorStore
from core.project import AnyManifest, ManifestError, parse_any_manifest
from core.project.compatibility import refusal
from core.project.reading import read_manifest_text
from core.project.signed import SignedManifest, sign_manifest
from core.trust.identity import Identity
from core.util.clock import Clock
from core.util.errors import BarnraiseError

log = logging.getLogger(__name__)

PATH = "/manifest"


class ManifestService(Protocol):
    """What the route needs of ``CoordinatorService``."""

    manifest: AnyManifest
    project_key: Identity
    clock: Clock

    @property
    def store(self) -> CoordinatorStore: ...


@dataclass(frozen=True)
class _Seen:
    """What ``stat`` said of the file when it was last read."""

    mtime_ns: int
    size: int
    inode: int


class ManifestPublisher:
    """Serves ``GET /manifest`` for one coordinator (see the module docstring)."""

    def __init__(self, service: ManifestService, path: Path | None = None) -> None:
        self._service = service
        self.path = path if path is not None else service.manifest.path
        """The organizer's manifest file; None: none to serve."""
        self._seen: _Seen | None = None
        self._served: StoredManifest | None = None
        self._problem: str | None = None
        """Why the file as it is now is not served (logged once per change of the file)."""
        self._shown: AnyManifest | None = None
        """The manifest of the version served, as read this run (None: none read yet)."""

    def route(self) -> web.RouteDef:
        return web.get(PATH, self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        try:
            served = self.current()
        except ManifestUnavailable as exc:
            return web.json_response({"error": str(exc), "code": "unavailable"}, status=503)
        return web.Response(
            body=served.envelope,
            content_type="application/json",
            charset="utf-8",
            headers={"Cache-Control": "no-cache", "ETag": f'"v{served.version}"'},
        )

    def current(self) -> StoredManifest:
        """The version to serve now, after looking whether the file changed."""
        if self.path is None:
            raise NotFound("this coordinator was started without a manifest file: it serves none")
        self._refresh(self.path)
        if self._served is None:
            # the file was broken from the first look on, and no earlier version is stored
            raise ManifestUnavailable(
                "the project's manifest cannot be served now: its organizer must fix the "
                f"manifest file ({self._problem})"
            )
        return self._served

    def shown(self) -> AnyManifest:
        """The manifest as volunteers get it now, for the project's page (its description, what it
        trains): the served version's, else the one the coordinator started with."""
        if self.path is not None:
            self._refresh(self.path)
        return self._shown or self._service.manifest

    def _refresh(self, path: Path) -> None:
        try:
            info = os.stat(path)
        except OSError as exc:
            self._not_served(None, f"cannot read {path}: {exc.strerror or exc}")
            return
        seen = _Seen(info.st_mtime_ns, info.st_size, info.st_ino)
        if seen == self._seen:
            return
        self._seen = seen
        try:
            text = read_manifest_text(path)
            manifest = parse_any_manifest(text, path=path)
        except ManifestError as exc:
            self._not_served(seen, str(exc))
            return
        # an edit that would split the swarm is not served: volunteers who join after it would
        # build a model the running peers cannot average with (engines refuse it too)
        problem = self._foreign(manifest) or refusal(self._service.manifest, manifest)
        if problem is not None:
            self._not_served(seen, problem)
            return
        self._problem = None
        self._served = self._version_of(text)
        self._shown = manifest

    def _foreign(self, manifest: AnyManifest) -> str | None:
        """Why ``manifest`` is not this coordinator's project's, or None."""
        project = self._service.manifest.project.name
        key = str(self._service.project_key.peer_id)
        if manifest.project.name != project:
            return (
                f"it is now the manifest of project {manifest.project.name!r}, and this "
                f"coordinator serves {project!r}"
            )
        named = manifest.access.project_key
        if named and named != key:
            return f"it names project key {named}, and this coordinator's key is {key}"
        return None

    def _version_of(self, text: str) -> StoredManifest:
        """The stored version of ``text``: the latest if it is the same text signed by the same
        key for the same project, else a new one."""
        service = self._service
        store = service.store.manifests
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        project = service.manifest.project.name
        latest = self._stored()
        if latest is not None and latest.sha256 == digest:
            return latest

        def sign(version: int) -> SignedManifest:
            return sign_manifest(
                service.project_key, project, text, version=version, issued=service.clock.time()
            )

        added = store.add(text, digest, sign)
        log.info("serving version %d of the manifest of %s", added.version, project)
        return added

    def _not_served(self, seen: _Seen | None, problem: str) -> None:
        if self._served is None:
            self._served = self._stored()  # what an earlier run served, if it is still ours
        if problem != self._problem:
            kept = (
                f"version {self._served.version} stays served"
                if self._served is not None
                else "no version is served"
            )
            log.error("the manifest file is not served as it is now: %s; %s", problem, kept)
        self._problem = problem
        if seen is None:
            self._seen = None  # look again on the next request

    def _stored(self) -> StoredManifest | None:
        """The latest version stored, if it is this project's, signed by this key."""
        latest = self._service.store.manifests.latest()
        if latest is None:
            return None
        signed = latest.signed
        ours = signed.project == self._service.manifest.project.name
        return latest if ours and signed.project_key == self._service.project_key.peer_id else None


class ManifestUnavailable(BarnraiseError):
    """No version of the manifest can be served (the file is broken, and none was before)."""
