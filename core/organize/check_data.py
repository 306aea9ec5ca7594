"""Whether a collaborative manifest's data is there: every shard reachable (the held-out ones of
``[evaluation]`` too), the first one readable.

Reachable: a local shard is a readable regular file; a remote one answers a one-byte ranged GET
with 200 or 206 (the body is not read: a server that ignores ranges would send the whole shard).
URLs are tried a few at a time, each within the timeout; every failure says which URL and why
(the HTTP status, or why the connection failed).

Readable: the first record of the first reachable shard, read by the peers' own reader
(``core.data.readers.read_shard``, streamed: only the first chunk is fetched), holds the text field.
The reader blocks, so it runs on a thread of its own, waited for at most a few timeouts.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import tempfile
import threading
from dataclasses import dataclass

import aiohttp

from core.data.errors import DataError
from core.data.readers import read_shard
from core.data.sources import DataSource, is_remote, local_location
from core.organize.findings import ERROR, OK, Finding
from core.project import Manifest
from core.util.web_client import client_session, connection_problem, is_loopback_url

CONCURRENCY = 16
"""Shard URLs tried at once."""
READ_TIMEOUTS = 3
"""The first record may take this many timeouts: the reader starts up, then fetches a chunk."""
PREVIEW = 60
"""Characters of the first text shown."""


HELD_OUT = -1
"""``Reach.source`` of the ``[evaluation]`` shards (the others number ``[[data.sources]]``)."""


@dataclass(frozen=True)
class Reach:
    """How one shard URL answered."""

    source: int
    """The ``[[data.sources]]`` table, or ``HELD_OUT``."""
    index: int
    url: str
    """As the manifest writes it."""
    location: str
    """Where it points (relative paths resolved)."""
    ok: bool
    detail: str

    @property
    def key(self) -> str:
        if self.source == HELD_OUT:
            return f"evaluation.urls[{self.index}]"
        return f"data.sources[{self.source}].urls[{self.index}]"


def reach_all(manifest: Manifest, data_base: str | None, timeout: float) -> list[Reach]:
    """Every shard URL of the manifest, the held-out ones too, tried (blocking; runs its own
    event loop)."""
    return asyncio.run(_reach_all(manifest, data_base, timeout))


async def _reach_all(manifest: Manifest, data_base: str | None, timeout: float) -> list[Reach]:
    limit = asyncio.Semaphore(CONCURRENCY)
    limits = aiohttp.ClientTimeout(total=timeout)
    # loopback URLs go direct, the others through the system's proxy (client_session)
    sessions = {True: client_session(limits, trust_env=False), False: client_session(limits)}
    try:

        async def one(source: int, index: int, url: str) -> Reach:
            location = manifest.resolve_url(url, data_base=data_base)
            async with limit:
                if is_remote(location):
                    ok, detail = await _get(sessions[is_loopback_url(location)], location, timeout)
                else:
                    ok, detail = await asyncio.to_thread(_local, location)
            return Reach(source, index, url, location, ok, detail)

        urls = [(s, source.urls) for s, source in enumerate(manifest.data.sources)]
        urls.append((HELD_OUT, manifest.evaluation.urls))
        return await asyncio.gather(
            *(one(s, i, url) for s, listed in urls for i, url in enumerate(listed))
        )
    finally:
        for session in sessions.values():
            await session.close()


async def _get(session: aiohttp.ClientSession, url: str, timeout: float) -> tuple[bool, str]:
    try:
        async with session.get(url, headers={"Range": "bytes=0-0"}) as response:
            status, reason = response.status, response.reason or ""
            response.close()  # drop the connection: never read a whole shard
    except TimeoutError:
        return False, f"no answer within {timeout:g} s"
    except aiohttp.InvalidURL:
        return False, "not a valid URL"
    except (aiohttp.ClientError, OSError) as exc:
        return False, f"cannot connect: {_connect_problem(exc)}"
    said = f"HTTP {status} {reason}".rstrip()
    return status in (200, 206), said


def _connect_problem(exc: BaseException) -> str:
    """Why a connection failed, in a few words: the host and port and the system's reason
    (refused, unknown name, unreachable) rather than aiohttp's sentence around it."""
    if isinstance(exc, aiohttp.ClientConnectorError) and not isinstance(
        exc, aiohttp.ClientSSLError
    ):
        failure = exc.os_error
        if isinstance(failure, socket.gaierror):
            reason = failure.strerror or str(failure)  # "Name or service not known"
        else:
            reason = os.strerror(failure.errno) if failure.errno else str(failure)
        return f"{exc.host}:{exc.port}: {reason}"
    return connection_problem(exc)


def _local(location: str) -> tuple[bool, str]:
    try:
        path = local_location(location)
        mode = os.stat(path).st_mode
    except DataError as exc:
        return False, str(exc)
    except FileNotFoundError:
        return False, "no such file"
    except OSError as exc:
        return False, f"cannot read: {exc.strerror or exc}"
    if not stat.S_ISREG(mode):
        return False, "not a file"
    if not os.access(path, os.R_OK):
        return False, "not readable by this user"
    return True, f"file, {os.stat(path).st_size:,} bytes"


def reach_findings(manifest: Manifest, reaches: list[Reach]) -> list[Finding]:
    """One line per failing URL and one per source."""
    findings = [
        Finding(ERROR, reach.key, f"{reach.location}: {reach.detail}")
        for reach in reaches
        if not reach.ok
    ]
    for s in range(len(manifest.data.sources)):
        mine = [reach for reach in reaches if reach.source == s]
        good = sum(reach.ok for reach in mine)
        status = OK if good == len(mine) else ERROR
        said = f" ({mine[0].detail})" if len(mine) == 1 and good else ""
        findings.append(
            Finding(status, f"data.sources[{s}]", f"{good} of {len(mine)} shards reachable{said}")
        )
    held_out = [reach for reach in reaches if reach.source == HELD_OUT]
    if held_out:
        good = sum(reach.ok for reach in held_out)
        findings.append(
            Finding(
                OK if good == len(held_out) else ERROR,
                "evaluation",
                f"{good} of {len(held_out)} held-out shards reachable (the backbone measures "
                "the model on them; without them it logs why and trains on)",
            )
        )
    return findings


def first_example(
    manifest: Manifest, reaches: list[Reach], data_base: str | None, timeout: float
) -> Finding:
    """The first record of the first reachable shard, read as a peer reads it."""
    reach = next((reach for reach in reaches if reach.ok and reach.source != HELD_OUT), None)
    if reach is None:
        return Finding(ERROR, "first example", "no shard is reachable, so none could be read")
    source = manifest.data.sources[reach.source]
    what = f"{reach.key} first record"
    try:
        fmt = DataSource((reach.location,), format=source.format).format_of(reach.location)
        text = _read_first(reach.location, fmt, source.text_field, timeout * READ_TIMEOUTS)
    except DataError as exc:
        return Finding(ERROR, what, str(exc))
    preview = text[:PREVIEW] + ("…" if len(text) > PREVIEW else "")
    return Finding(
        OK, what, f"{fmt}, field {source.text_field!r}: {preview!r} ({len(text):,} characters)"
    )


def _read_first(location: str, fmt: str, text_field: str, waited: float) -> str:
    """The shard's first text; ``DataError`` for every way that fails (within ``waited`` s)."""
    outcome: list[str | BaseException | None] = []

    def read() -> None:
        with tempfile.TemporaryDirectory(prefix="barnraise-check-") as cache:
            try:
                texts = read_shard(location, fmt=fmt, text_field=text_field, cache_dir=cache)
                outcome.append(next(iter(texts), None))
            except BaseException as exc:  # handed to the waiting thread, which words it
                outcome.append(exc)

    # a daemon thread: a reader stuck on the network must not keep the command from exiting
    reader = threading.Thread(target=read, name="check-first-example", daemon=True)
    reader.start()
    reader.join(waited)
    if not outcome:
        raise DataError(f"{location}: nothing read within {waited:g} s")
    result = outcome[0]
    if isinstance(result, DataError):
        raise result
    if isinstance(result, BaseException):
        raise DataError(f"cannot read {location}: {result}")
    if result is None:
        raise DataError(f"{location} holds no records")
    return result
