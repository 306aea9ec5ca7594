"""A checkpoint published over HTTP with an index that the project key signs.

The backbone copies its latest checkpoint into a folder that the organizer serves over HTTP (the
manifest's ``network.checkpoint_url``), next to ``index.json``::

    {"format": 1, "project": "barnraise-demo", "epoch": 30, "loss": 5.71,
     "file": "checkpoint-00000030.pt", "size": 6912345, "sha256": "<hex>",
     "published_at": 1718000000.0, "signature": "<hex>"}

The signature is the project key's (``access.project_key``) over a canonical msgpack payload of
every other field, so a volunteer's peer that finds no other peer can start from a checkpoint it
did not get from a peer it trusts: the web server, a mirror or a cache in between can withhold the
checkpoint but not alter it unnoticed. The index names the file's size and SHA-256; the download is
checked against both before it is renamed into place.

The folder keeps the file the index names and the one published before it, so that a download that
began just before a new publication still finds its file.

Beside each checkpoint the backbone may publish the model in the transformers format, in an archive
with an index of its own (``model``).

The checkpoint is only bytes here: this module does not import torch (``CheckpointStore.load``
reads the fetched file).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import aiohttp

from core.project import Manifest
from core.training.errors import CheckpointError
from core.training.publish.folder import previously_published, prune
from core.trust.identity import Identity
from core.trust.peer_id import PeerID
from core.trust.signed_index import (
    check_signed,
    index_json,
    is_number,
    read_common,
    read_head,
    signed_payload,
)
from core.util.errors import BarnraiseError
from core.util.files.atomic import remove_temporaries, write_atomically
from core.util.web_client import client_session, connection_problem

log = logging.getLogger(__name__)
T = TypeVar("T")

FORMAT = 1
INDEX_NAME = "index.json"
_DOMAIN = "barnraise/published-checkpoint/v1"
# The only names an index may give its file: a plain name in the folder, never a path.
_FILE_NAME = re.compile(r"checkpoint-\d{8,}\.pt")
_TEMP_PREFIX = ".publishing-"
_PART_SUFFIX = ".part"
_CHUNK = 1024 * 1024
# An index is a few hundred bytes; anything far larger is not one, and is not read into memory.
_MAX_INDEX_BYTES = 64 * 1024


class PublishedCheckpointError(CheckpointError):
    """A checkpoint cannot be published, or a published one cannot be fetched or trusted; the
    message names the folder or URL and the reason."""


@dataclasses.dataclass(frozen=True)
class PublishedIndex:
    """The signed description of the published checkpoint (``index.json``)."""

    project: str
    epoch: int
    loss: float | None
    file: str
    """The checkpoint's file name in the published folder (never a path)."""
    size: int
    sha256: str
    """The file's SHA-256, lowercase hex."""
    published_at: float
    """Unix time, seconds."""
    signature: bytes

    def payload(self) -> bytes:
        """The bytes the project key signs."""
        loss = None if self.loss is None else float(self.loss)
        return signed_payload(_DOMAIN, FORMAT, self, [loss])

    def to_json(self) -> dict[str, Any]:
        return index_json(FORMAT, self, {"loss": self.loss})

    @classmethod
    def from_json(cls, raw: object, source: str) -> PublishedIndex:
        """Parse an index's JSON value; ``PublishedCheckpointError`` naming ``source`` if it is
        not one (the signature is not checked here: see ``check``)."""

        def bad(reason: str) -> PublishedCheckpointError:
            return PublishedCheckpointError(f"{source} is not a valid checkpoint index: {reason}")

        fields = read_head(raw, FORMAT, _FIELDS, bad)
        loss = fields["loss"]
        if loss is not None and not (is_number(loss) and math.isfinite(loss)):
            raise bad(f"loss {loss!r} is not a finite number")
        common = read_common(fields, _FILE_NAME, "checkpoint file", bad)
        return cls(loss=None if loss is None else float(loss), **common)

    def check(self, project: str, project_key: PeerID, source: str) -> None:
        """Raise ``PublishedCheckpointError`` unless this index is for ``project`` and the project
        key signed it."""
        check_signed(
            self, project, project_key, source, what="a checkpoint", error=PublishedCheckpointError
        )


_FIELDS = ("project", "epoch", "loss", "file", "size", "sha256", "published_at", "signature")


def sign_index(
    project_key: Identity,
    *,
    project: str,
    epoch: int,
    loss: float | None,
    file: str,
    size: int,
    sha256: str,
    published_at: float,
) -> PublishedIndex:
    """An index with these fields, signed by ``project_key``."""
    unsigned = PublishedIndex(
        project, epoch, None if loss is None else float(loss), file, size, sha256, published_at, b""
    )
    return dataclasses.replace(unsigned, signature=project_key.sign(unsigned.payload()))


@dataclasses.dataclass(frozen=True)
class CheckpointPublishing:
    """Where and as whom a backbone publishes its checkpoints."""

    folder: Path
    project_key: Identity
    project: str
    beside: Callable[[Path, PublishedIndex], None] | None = None
    """What else to publish beside each checkpoint once it is published, given its path and index:
    the model in the transformers format, composed above training (``core.cli.peer.backbone``)."""

    def publish(self, path: Path, epoch: int, loss: float | None) -> PublishedIndex:
        """Publish the checkpoint at ``path`` (see ``publish_checkpoint``), then what goes
        ``beside`` it, whose failure is logged and never undoes or stops the checkpoint's.
        Blocking file I/O (a copy of the whole checkpoint): call it from a worker thread, not the
        event loop."""
        index = publish_checkpoint(
            path, self.folder, self.project_key, epoch=epoch, loss=loss, project=self.project
        )
        if self.beside is not None:
            try:
                self.beside(path, index)
            except (BarnraiseError, OSError) as exc:
                log.warning("the model of epoch %d was not published: %s", epoch, exc)
            # anything else too: the export runs torch, safetensors and tokenizers, whose own
            # errors must not stop the backbone
            except Exception:
                log.exception("the model of epoch %d was not published", epoch)
        return index


def publish_checkpoint(
    checkpoint_path: Path,
    folder: Path,
    project_key: Identity,
    *,
    epoch: int,
    loss: float | None,
    project: str,
) -> PublishedIndex:
    """Copy the checkpoint into ``folder`` and sign a new ``index.json`` naming it.

    The copy and the index are each written aside, synced and renamed into place, so a reader
    sees the old index or the new one, and the file an index names is always whole. Removes
    published checkpoints other than this one and the one the previous index named.

    Raises ``PublishedCheckpointError`` for a negative epoch, a non-finite loss, a folder that is
    the checkpoint's own (pruning there would delete the store's checkpoints), or a failed read or
    write (the message names the file).
    """
    checkpoint_path, folder = Path(checkpoint_path), Path(folder)
    if epoch < 0:
        raise PublishedCheckpointError(f"a published checkpoint's epoch must be 0 or more: {epoch}")
    if loss is not None and not math.isfinite(loss):
        raise PublishedCheckpointError(
            f"not publishing the checkpoint of epoch {epoch}: loss {loss}"
        )
    if folder.resolve() == checkpoint_path.parent.resolve():
        raise PublishedCheckpointError(
            f"cannot publish {checkpoint_path} into its own folder {folder}; "
            "publish into a folder of its own"
        )
    name = f"checkpoint-{epoch:08d}.pt"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        remove_temporaries(folder, _TEMP_PREFIX)
        previous = previously_published(folder, INDEX_NAME, _FILE_NAME)
        size, sha256 = _copy_atomically(checkpoint_path, folder / name)
        index = sign_index(
            project_key,
            project=project,
            epoch=epoch,
            loss=loss,
            file=name,
            size=size,
            sha256=sha256,
            published_at=time.time(),
        )
        text = json.dumps(index.to_json(), indent=1, allow_nan=False) + "\n"
        _write_atomically(folder / INDEX_NAME, text.encode("utf-8"))
    except OSError as e:
        raise PublishedCheckpointError(
            f"could not publish {checkpoint_path} into {folder}: {e}"
        ) from e
    prune(folder, {name, previous}, _FILE_NAME, "published checkpoint", log)
    log.info("published the checkpoint of epoch %d in %s", epoch, folder)
    return index


def _copy_atomically(source: Path, target: Path) -> tuple[int, str]:
    """Copy ``source`` to ``target`` through a synced temporary; return the size and SHA-256."""
    digest = hashlib.sha256()
    size = 0
    with source.open("rb") as reader:

        def copy(writer: BinaryIO) -> None:
            nonlocal size
            while chunk := reader.read(_CHUNK):
                digest.update(chunk)
                writer.write(chunk)
                size += len(chunk)

        _write_with(target, copy)
    return size, digest.hexdigest()


def _write_atomically(target: Path, data: bytes) -> None:
    _write_with(target, lambda writer: writer.write(data))


def _write_with(target: Path, write: Callable[[BinaryIO], object]) -> None:
    # the web server serving the folder must read the file
    write_atomically(target, write, prefix=_TEMP_PREFIX, mode=0o644)


async def fetch_published_checkpoint(
    url: str,
    project_key: PeerID,
    project: str,
    dest: Path,
    *,
    newer_than: int = -1,
    timeout: float = 60.0,
    max_bytes: int | None = None,
) -> Path | None:
    """Download the checkpoint published at ``url`` (a folder URL) into ``dest``, verified.

    Reads ``<url>/index.json``, checks that the project key signed it for ``project``, and returns
    None without downloading when its epoch is not above ``newer_than``. Otherwise streams the
    file to ``dest/<file>.part``, checks its size and SHA-256 against the index, renames it to
    ``dest/<file>`` and returns that path.

    ``timeout`` bounds the wait for a connection and for each next piece of data, not the whole
    download, so a slow but steady download of a large checkpoint is not cut off.

    Raises ``PublishedCheckpointError`` naming the URL and the reason (unreachable, an HTTP error,
    not an index, another project, a bad signature, larger than ``max_bytes``, truncated, a
    SHA-256 mismatch, a file that cannot be written); no partial file is left behind.
    """
    if not url.startswith(("http://", "https://")):
        raise PublishedCheckpointError(f"checkpoint URL {url!r} is not an http(s):// URL")
    base = url if url.endswith("/") else url + "/"
    index_url = base + INDEX_NAME
    limits = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
    async with client_session(limits, url=url) as session:
        raw = await _get(session, index_url, _read_index)
        try:
            document = json.loads(raw)
        except ValueError as e:
            raise PublishedCheckpointError(f"{index_url} is not JSON: {e}") from None
        index = PublishedIndex.from_json(document, index_url)
        index.check(project, project_key, index_url)
        if index.epoch <= newer_than:
            log.info("%s publishes epoch %d: nothing newer than %d", url, index.epoch, newer_than)
            return None
        if max_bytes is not None and index.size > max_bytes:
            raise PublishedCheckpointError(
                f"{index_url} names a checkpoint of {index.size} bytes, more than the "
                f"{max_bytes} allowed"
            )
        dest = Path(dest)
        target = dest / index.file
        part = dest / (index.file + _PART_SUFFIX)
        try:
            dest.mkdir(parents=True, exist_ok=True)
            await _get(session, base + index.file, functools.partial(_download, index, part))
            os.replace(part, target)
        except OSError as e:
            raise PublishedCheckpointError(
                f"could not write the checkpoint from {base + index.file} to {target}: {e}"
            ) from e
        finally:
            part.unlink(missing_ok=True)
    return target


async def _get(
    session: aiohttp.ClientSession,
    url: str,
    read: Callable[[aiohttp.ClientResponse, str], Awaitable[T]],
) -> T:
    """GET ``url`` and hand a 200 response to ``read``; network failures become our error."""
    try:
        async with session.get(url) as response:
            if response.status != 200:
                raise PublishedCheckpointError(
                    f"{url} answered HTTP {response.status} {response.reason or ''}".rstrip()
                )
            return await read(response, url)
    except aiohttp.ClientPayloadError as e:
        raise PublishedCheckpointError(f"{url} broke off mid-download (truncated): {e}") from e
    # before ClientError: aiohttp's timeouts are both
    except TimeoutError as e:
        raise PublishedCheckpointError(f"{url} did not answer within the timeout") from e
    except aiohttp.ClientError as e:
        raise PublishedCheckpointError(f"{url} is unreachable: {connection_problem(e)}") from e


async def _read_index(response: aiohttp.ClientResponse, url: str) -> bytes:
    data = bytearray()
    async for chunk in response.content.iter_chunked(_CHUNK):
        data += chunk
        if len(data) > _MAX_INDEX_BYTES:
            raise PublishedCheckpointError(
                f"{url} is larger than {_MAX_INDEX_BYTES} bytes: not a checkpoint index"
            )
    return bytes(data)


async def _download(
    index: PublishedIndex, part: Path, response: aiohttp.ClientResponse, url: str
) -> None:
    """Stream the published file to ``part``, checking it against ``index``."""
    digest = hashlib.sha256()
    size = 0
    # Disk writes and the final fsync go to a worker thread: a checkpoint can be large, and the
    # loop must keep serving the peer's connections meanwhile.
    writer = await asyncio.to_thread(part.open, "wb")
    try:
        async for chunk in response.content.iter_chunked(_CHUNK):
            size += len(chunk)
            if size > index.size:
                raise PublishedCheckpointError(
                    f"{url} is longer than the {index.size} bytes its index names"
                )
            digest.update(chunk)
            await asyncio.to_thread(writer.write, chunk)
        await asyncio.to_thread(_sync, writer)
    finally:
        writer.close()
    if size < index.size:
        raise PublishedCheckpointError(
            f"{url} is truncated: {size} of the {index.size} bytes its index names"
        )
    if digest.hexdigest() != index.sha256:
        raise PublishedCheckpointError(
            f"{url} does not match its index: SHA-256 {digest.hexdigest()}, expected {index.sha256}"
        )


def _sync(writer: BinaryIO) -> None:
    writer.flush()
    os.fsync(writer.fileno())


def published_fallback(
    manifest: Manifest, work_dir: Path
) -> Callable[[int], Awaitable[Path | None]] | None:
    """The organizers' published checkpoint, for a peer that no other peer can give the state:
    fetched into ``work_dir/published`` when newer than the epoch asked for. None when the
    manifest names no ``network.checkpoint_url``, or no project key to verify it with."""
    url, key = manifest.network.checkpoint_url, manifest.access.key
    if not url:
        return None
    if key is None:
        log.warning(
            "the manifest's network.checkpoint_url cannot be used: without access.project_key "
            "its checkpoints cannot be verified"
        )
        return None
    project, folder = manifest.project.name, work_dir / "published"

    def fetch(newer_than: int) -> Awaitable[Path | None]:
        return fetch_published_checkpoint(url, key, project, folder, newer_than=newer_than)

    return fetch
