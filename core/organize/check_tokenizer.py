"""Whether a collaborative manifest's tokenizer fits its model.

The file (``data.tokenizer``: a path beside the manifest, or a URL, fetched here up to a size
limit) must load as the peers load it (``core.data.load_tokenizer``: the ``tokenizers`` library's
JSON, with the five special tokens masked language modelling needs), and its vocabulary must fit
the model: a token id at or past ``model.vocab_size`` has no embedding row (an error); a smaller
vocabulary only leaves rows unused (a warning, as with the demo's small corpus). A missing file is a
warning: ``barnraise swarm`` trains the demo's from its shards, and an organizer may add it later,
but volunteers' peers cannot train until it is there.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import aiohttp

from core.data.errors import DataError
from core.data.sources import is_remote, local_location
from core.data.tokenizer import load_tokenizer
from core.organize.findings import ERROR, OK, WARNING, Finding
from core.project import Manifest
from core.util.web_client import client_session, connection_problem

WHAT = "data.tokenizer"
MAX_TOKENIZER_BYTES = 256 * 1024 * 1024
"""A tokenizer's JSON is megabytes; a larger download is not one."""
_CHUNK = 1 << 16


class _Missing(Exception):
    """The tokenizer is not there (a 404 or no file): a warning, not an error."""


def check_tokenizer(manifest: Manifest, data_base: str | None, timeout: float) -> Finding:
    where = manifest.resolve_url(manifest.data.tokenizer, data_base=data_base)
    with tempfile.TemporaryDirectory(prefix="barnraise-check-") as scratch:
        try:
            path = _fetched(where, Path(scratch), timeout) if is_remote(where) else _local(where)
            tokenizer = load_tokenizer(path)
        except _Missing as missing:
            return Finding(
                WARNING,
                WHAT,
                f"{where}: {missing}. Volunteers' peers cannot train until it is there: "
                "`barnraise swarm` trains the demo's from its shards on first run; for this "
                f"project train one ({manifest.data.tokenizer_vocab_size} tokens, e.g. with "
                "core.data.train_tokenizer) and put it there",
            )
        except DataError as exc:
            return Finding(ERROR, WHAT, str(exc))
    size, rows = tokenizer.vocab_size, manifest.model.vocab_size
    if size > rows:
        return Finding(
            ERROR,
            WHAT,
            f"{where} has {size:,} tokens but model.vocab_size (= data.tokenizer_vocab_size) is "
            f"{rows:,}: token ids past {rows - 1:,} have no embedding and training fails; use a "
            f"tokenizer of at most {rows:,} tokens, or make both sizes {size:,}",
        )
    if size < rows:
        return Finding(
            WARNING,
            WHAT,
            f"{where} has {size:,} tokens, model.vocab_size {rows:,}: {rows - size:,} embedding "
            "rows are never used (fine for a small corpus such as the demo's; a real project's "
            "tokenizer should fill the vocabulary)",
        )
    return Finding(OK, WHAT, f"{where} loads, {size:,} tokens = model.vocab_size")


def _local(where: str) -> Path:
    path = Path(local_location(where))
    if not path.exists():
        raise _Missing("no such file")
    return path


def _fetched(url: str, folder: Path, timeout: float) -> Path:
    return asyncio.run(_fetch(url, folder / "tokenizer.json", timeout))


async def _fetch(url: str, target: Path, timeout: float) -> Path:
    limits = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
    try:
        async with (
            client_session(limits, url=url) as session,
            session.get(url) as response,
        ):
            if response.status == 404:
                raise _Missing("HTTP 404 Not Found")
            if response.status != 200:
                raise DataError(f"{url}: HTTP {response.status} {response.reason or ''}".rstrip())
            received = 0
            with target.open("wb") as out:
                async for chunk in response.content.iter_chunked(_CHUNK):
                    received += len(chunk)
                    if received > MAX_TOKENIZER_BYTES:
                        raise DataError(
                            f"{url} is larger than {MAX_TOKENIZER_BYTES >> 20} MiB: not a tokenizer"
                        )
                    out.write(chunk)
    except TimeoutError:
        raise DataError(f"{url}: no answer within {timeout:g} s") from None
    except aiohttp.ClientError as exc:
        raise DataError(f"{url}: cannot connect: {connection_problem(exc)}") from None
    return target
