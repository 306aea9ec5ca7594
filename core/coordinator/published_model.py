"""The model the backbone published, as the coordinator learns it: ``network.checkpoint_url`` +
``model.json``, signed by the project key (``core.trust.published_model``).

The project page offers it for download. The index is fetched with the project's web client
(``core.util.web_client``: the system's certificates and proxy), checked (this project, the project
key's signature, plain file name) and kept for ``TTL`` seconds; a fetch is then started again by the
next visitor, in the background, so that no page waits for the checkpoint server. Only while no
model is known does the page wait for the fetch (``FIRST_WAIT`` at most), so that a fresh
coordinator's first visitor sees the model too. A failed fetch keeps the last good index (and is
logged once per distinct reason); with none ever fetched there is nothing to offer. The archive
itself is never downloaded here: its size and SHA-256 are in the signed index, for whoever
downloads it to check.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

import aiohttp

from core.trust.peer_id import PeerID
from core.trust.published_model import (
    INDEX_NAME,
    MAX_INDEX_BYTES,
    ModelIndex,
    PublishedModelError,
)
from core.util.clock import Clock
from core.util.tasks import BackgroundTasks
from core.util.web_client import client_session, connection_problem

log = logging.getLogger(__name__)

TTL = 60.0
"""Seconds a fetched index (or a failed fetch) is trusted before the next visitor asks again."""
FIRST_WAIT = 2.0
"""Seconds the first page waits for the first fetch."""
TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class PublishedModel:
    """A verified index and where its archive is."""

    index: ModelIndex
    url: str
    """The archive's URL."""


class _NotPublished(PublishedModelError):
    """No index there (yet): before the first checkpoint, or a backbone that publishes none."""


class PublishedModels:
    def __init__(self, project: str, project_key: PeerID, clock: Clock) -> None:
        self.project = project
        self.project_key = project_key
        self.clock = clock
        self._url: str = ""
        self._known: PublishedModel | None = None
        self._asked: float | None = None
        """When the last fetch began (the clock's monotonic time)."""
        self._fetching: asyncio.Task[None] | None = None
        self._failure: str | None = None
        self._tasks = BackgroundTasks("published-model")

    async def current(self, checkpoint_url: str, *, wait: bool = False) -> PublishedModel | None:
        """The model published at ``checkpoint_url`` as last fetched; a fetch starts when the last
        is older than ``TTL``. With ``wait``, the very first lookup waits for its fetch."""
        url = checkpoint_url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            return None
        if url != self._url:  # the organizer edited the manifest: what we knew is of another URL
            self._url, self._known, self._asked, self._failure = url, None, None, None
        now = self.clock.monotonic()
        stale = self._asked is None or now - self._asked >= TTL
        if stale and (self._fetching is None or self._fetching.done()) and not self._tasks.closed:
            self._asked = now
            self._fetching = self._tasks.spawn("fetch", self._fetch(url))
        fetching = self._fetching
        if wait and self._known is None and fetching is not None and not fetching.done():
            await asyncio.wait({fetching}, timeout=FIRST_WAIT)
        return self._known

    async def close(self) -> None:
        await self._tasks.close()

    async def _fetch(self, url: str) -> None:
        index_url = f"{url}/{INDEX_NAME}"
        try:
            index = await self._read(index_url)
        except PublishedModelError as exc:
            words = str(exc)
            if words != self._failure:
                kept = " (the page keeps offering the last one)" if self._known else ""
                quiet = isinstance(exc, _NotPublished) and self._known is None
                log.log(
                    logging.INFO if quiet else logging.WARNING,
                    "the published model cannot be offered: %s%s",
                    words,
                    kept,
                )
            self._failure = words
            return
        if url != self._url:
            return  # the manifest changed while we fetched
        self._failure = None
        if self._known is None or self._known.index != index:
            log.info("the published model is now %s (epoch %d)", index.file, index.epoch)
        self._known = PublishedModel(index, f"{url}/{index.file}")

    async def _read(self, index_url: str) -> ModelIndex:
        limits = aiohttp.ClientTimeout(total=TIMEOUT)
        try:
            async with (
                client_session(limits, url=index_url) as session,
                session.get(index_url) as response,
            ):
                if response.status == 404:
                    raise _NotPublished(f"{index_url} is not there (no model published yet)")
                if response.status != 200:
                    raise PublishedModelError(f"{index_url} answered HTTP {response.status}")
                data = bytearray()
                async for chunk in response.content.iter_chunked(MAX_INDEX_BYTES):
                    data += chunk
                    if len(data) > MAX_INDEX_BYTES:
                        raise PublishedModelError(f"{index_url} is too large for a model index")
        except TimeoutError:  # before ClientError: aiohttp's timeouts are both
            raise PublishedModelError(f"{index_url} did not answer in time") from None
        except aiohttp.ClientError as exc:
            raise PublishedModelError(
                f"{index_url} is unreachable: {connection_problem(exc)}"
            ) from None
        try:
            document = json.loads(data)
        except (ValueError, RecursionError):
            raise PublishedModelError(f"{index_url} is not JSON") from None
        index = ModelIndex.from_json(document, index_url)
        index.check(self.project, self.project_key, index_url)
        return index
