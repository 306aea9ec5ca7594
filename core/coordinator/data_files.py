"""``DataFiles``: the project's public data folder, served read-only at ``GET /data/<path>``.

A small project needs no web server of its own for its shards and tokenizer: the coordinator
serves one folder (``barnraise coordinator --data DIR``), and the manifest names its files under
``<public URL>/data/``. Only regular files are served, the ones under the folder: a path with an
empty, ``.`` or ``..`` part, a hidden name (``.``-prefixed: editors' and tools' leftovers, partial
writes), a NUL or a backslash, or one that resolves (symlinks followed) outside the folder, is a
404, as is a folder (no listings), a FIFO or a device (found by ``stat``, never opened: a FIFO
would block the reader). A folder that holds the coordinator's database or the project key is
refused at start: it must hold only what everyone may download; and whatever folder it is, nothing
named like a secret is served (``named_like_secret``: keys, env files, databases with their
journals and backups, SSH keys, credentials, passwords, tokens, in any file or folder name of the
path), so a folder given by mistake (the project's ``services/`` with its ``backbone.env``) leaks no
password. Nor is a hard link (a file with more than one name): a public data file has no reason to
be one, and a link to the coordinator's database or key under an innocent name (``notes.txt``)
would pass every rule by name. A refused file answers exactly as a missing one does, so a request
learns nothing of what the folder holds.

aiohttp's ``FileResponse`` sends the file: single byte ranges (206; the data reader and ``barnraise
project check`` read shards by ranges), ``HEAD``, ``ETag`` and conditional requests, ``sendfile``.
It would also answer a request for ``x`` with a sibling file ``x.gz`` (or ``x.br``) sent as a
compressed encoding of ``x``; ``_OneFile`` turns that off: ranges of the sibling are not the shard's.
Refusals are JSON like the API's (``{"error", "code"}``), and every answer carries the page's
security headers, with a policy that lets nothing in a data file run (``sandbox``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aiohttp import hdrs, web

from core.coordinator.errors import NotFound
from core.coordinator.http import error_response
from core.coordinator.page.routes import SECURITY_HEADERS
from core.util.errors import ConfigError

log = logging.getLogger(__name__)

PREFIX = "/data/"
"""Where the folder's files are served: ``<public URL>/data/<relative path>``."""
MAX_PATH_CHARS = 1024
"""Longer relative paths are refused before the file system is asked."""
CACHE_CONTROL = "public, max-age=3600"
"""Shards and the tokenizer never change under one name (peers must agree on them): an hour's
caching spares the coordinator, and a fixed file is seen within the hour."""
HEADERS = {
    **SECURITY_HEADERS,
    # a data file is never a page of the project's site: it runs nothing, loads nothing
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'; sandbox",
    "Cache-Control": CACHE_CONTROL,
}


def check_data_folder(folder: Path, private: Sequence[Path] = ()) -> Path:
    """The folder, resolved; ``ConfigError`` unless it is a folder that holds none of ``private``
    (the database, the project key: files that must never be downloadable)."""
    try:
        root = folder.expanduser().resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise ConfigError(f"the data folder {folder} cannot be served: {exc}") from None
    if not root.is_dir():
        raise ConfigError(f"the data folder {folder} is not a folder")
    for path in private:
        if path.expanduser().resolve().is_relative_to(root):
            raise ConfigError(
                f"the data folder {folder} holds {path}, which must stay private: serve a folder "
                "that holds only public files (the shards and the tokenizer)"
            )
    return root


@dataclass(frozen=True)
class Found:
    path: Path
    size: int
    mtime: float


class DataFiles:
    """The routes serving ``folder`` (checked by ``check_data_folder``)."""

    def __init__(self, folder: Path, private: Sequence[Path] = ()) -> None:
        self.root = check_data_folder(folder, private)

    def routes(self) -> list[web.RouteDef]:
        return [web.get(PREFIX + "{path:.+}", self._serve)]  # and HEAD

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        found = await asyncio.to_thread(self.locate, request.match_info["path"])
        if found is None:
            return _refused(NotFound("no such data file"), request)
        unsatisfiable = _unsatisfiable(request, found)
        if unsatisfiable is not None:
            return unsatisfiable
        return _OneFile(found.path, headers=HEADERS)

    def locate(self, relative: str) -> Found | None:
        """The regular file ``relative`` names under the folder, or None (blocking: stats only)."""
        parts = relative.split("/")
        if (
            len(relative) > MAX_PATH_CHARS
            or "\x00" in relative
            or "\\" in relative
            or not all(_plain(part) for part in parts)
        ):
            return None
        try:
            real = self.root.joinpath(*parts).resolve(strict=True)
            inside = real.relative_to(self.root)
            status = os.stat(real)  # never open(): a FIFO would block until a writer came
        except (OSError, ValueError, RuntimeError):  # missing, too long, outside, a loop
            return None
        if not all(_plain(part) for part in inside.parts) or not stat.S_ISREG(status.st_mode):
            return None
        refusal = _refusal(real, (*parts, *inside.parts), status)
        if refusal is not None:
            log.warning("data file %s %s: not served", real, refusal)
            return None  # answered as a missing file: a request learns nothing of the folder
        return Found(real, status.st_size, status.st_mtime)


def _refusal(real: Path, names: Sequence[str], status: os.stat_result) -> str | None:
    """Why a regular file under the folder, reached through ``names``, is not served; None if it
    is served."""
    if any(named_like_secret(name) for name in names):
        return "is named like a secret"
    if status.st_nlink > 1:
        return f"is a hard link ({status.st_nlink} names: public files have one)"
    if not os.access(real, os.R_OK):
        return "is not readable by the coordinator"
    return None


SECRET_PARTS = frozenset(
    {"pem", "key", "env", "db", "sqlite", "sqlite3", "netrc", "pgpass", "p12", "pfx", "ppk", "kdbx"}
)
"""Dot-separated parts of a name that mark a secret: keys, env files, databases, password files
(``barnraise project new`` writes ``*-key.pem``, ``services/backbone.env``, ``coordinator.db``). After
the first part, one followed by ``-`` or ``_`` marks one too: a database's ``db-journal``,
``db-wal``, ``sqlite3-shm``."""
SECRET_WORDS = (
    "secret",
    "password",
    "passwd",
    "credential",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
)
"""Found anywhere in a name: nothing public is called ``client_secret.json`` or ``id_ed25519.pub``."""
SECRET_TOKENS = frozenset({"token"})
"""Whole words (between ``.``, ``-``, ``_``, spaces) that mark a secret: ``api-token.txt``, never
``tokenizer.json``."""


def named_like_secret(name: str) -> bool:
    """Whether a file or folder named ``name`` may hold a secret, case aside: a part of
    ``SECRET_PARTS`` (``backbone.env.txt``, ``coordinator.db.bak``, ``c.db-journal``), one of
    ``SECRET_WORDS`` anywhere in it, or a word of ``SECRET_TOKENS``. An editor's backup
    (``coordinator.db~``) is named like what it copies."""
    lowered = name.lower()
    if any(word in lowered for word in SECRET_WORDS):
        return True
    parts = [part.rstrip("~#") for part in lowered.split(".")]
    for index, part in enumerate(parts):
        if part in SECRET_PARTS:
            return True
        # the first part is a name's own word (``key-points.jsonl``); later ones are extensions
        head = re.split(r"[-_]", part, maxsplit=1)[0]
        if index > 0 and head in SECRET_PARTS:
            return True
    return any(word in SECRET_TOKENS for word in re.split(r"[-_.\s]+", lowered))


def _plain(part: str) -> bool:
    """A name of a file or folder that is served: not empty, not hidden (nor ``.``/``..``), and
    one name on this system (no separator; on Windows no drive or stream either)."""
    if not part or part.startswith("."):
        return False
    separators = (os.sep, os.altsep, ":" if os.name == "nt" else None)
    return not any(sep in part for sep in separators if sep)


def _unsatisfiable(request: web.Request, found: Found) -> web.StreamResponse | None:
    """A 416 for a Range header that cannot be served (malformed, or past the end), as JSON;
    None for no range or one ``FileResponse`` serves. As there, a Range that ``If-Range`` voids
    is not looked at."""
    if hdrs.RANGE not in request.headers:
        return None
    if_range = request.if_range
    if if_range is not None and found.mtime > if_range.timestamp():
        return None
    try:
        wanted = request.http_range
    except ValueError:  # malformed, several ranges, a number of thousands of digits
        wanted = None
    if wanted is not None and found.size > 0 and (wanted.start or 0) < found.size:
        return None
    response = web.json_response(
        {
            "error": f"the range asked for is not in the file ({found.size:,} bytes): ask for "
            "one range of bytes that starts before its end, or for the whole file",
            "code": "range_not_satisfiable",
        },
        status=416,
        headers={**HEADERS, hdrs.CONTENT_RANGE: f"bytes */{found.size}"},
    )
    response.headers.pop("Cache-Control")
    return response


def _refused(exc: Exception, request: web.Request) -> web.Response:
    response = error_response(exc, f"{request.method} {request.path}")
    response.headers.update({k: v for k, v in HEADERS.items() if k != "Cache-Control"})
    return response


class _OneFile(web.FileResponse):
    """The file asked for, never a compressed sibling in its place."""

    def _get_file_path_stat_encoding(
        self, accept_encoding: str
    ) -> tuple[Path | None, os.stat_result, str | None]:
        status = self._path.stat()
        return (self._path if stat.S_ISREG(status.st_mode) else None), status, None
