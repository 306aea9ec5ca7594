"""Reading one shard as a stream of texts, whatever its format and wherever it lives.

JSON Lines and Parquet shards are read with `datasets` in streaming mode: a remote shard is fetched
piece by piece with HTTP range requests, so the first text arrives long before the whole shard could
have been downloaded. Plain-text shards are read line by line with the standard library instead: the
`datasets` text loader opens files in text mode, which over HTTP hands an ``encoding`` argument on to
aiohttp and fails (datasets 5.2, fsspec 2026.9), while reading bytes and decoding them here works
everywhere and streams just the same.

Both ways take the operating system's certificate store and proxy settings (``core.util.web_client``):
`datasets` gets its HTTP sessions from ``client_session`` (fsspec's ``get_client`` storage option),
and plain text is opened with ``open_url``.

Every failure (missing shard, HTTP error, damaged compression, bad records) becomes a ``DataError``
naming the shard's URL, raised where it happens: a bad shard never ends a stream silently.
"""

from __future__ import annotations

import gzip
import io
import os
import urllib.error
from collections.abc import Iterator
from typing import Any, BinaryIO, TextIO

import aiohttp

from core.data.errors import DataError
from core.data.sources import is_remote, local_location, url_path
from core.util.web_client import client_session, open_url, tls_problem

_JSON_CHUNK = 1 << 20  # bytes of JSON Lines parsed at a time: the first text comes after ~1 MB
_HTTP_TIMEOUT = 60.0  # seconds without data before a plain-text download counts as failed
_MAX_REASON = 300  # characters of an underlying error kept in our message


def read_shard(
    url: str, *, fmt: str, text_field: str = "text", cache_dir: str | None = None
) -> Iterator[str]:
    """Yield the texts of one shard in file order (empty texts included; callers filter).

    ``fmt`` is ``"jsonl"``, ``"parquet"`` or ``"text"``. Reading is lazy: nothing is opened until the
    first text is asked for, and a failure at any point raises ``DataError`` naming ``url``.
    ``cache_dir`` is where `datasets` may put its bookkeeping (it caches no data when streaming);
    None means its default, ``~/.cache/huggingface/datasets``.
    """
    try:
        if fmt == "text":
            yield from _read_text(url)
        elif fmt in ("jsonl", "parquet"):
            yield from _read_with_datasets(url, fmt, text_field, cache_dir)
        else:
            raise DataError(f"cannot read {url}: unknown format {fmt!r}")
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"cannot read shard {url}: {_describe(exc)}") from exc


def _read_with_datasets(
    url: str, fmt: str, text_field: str, cache_dir: str | None
) -> Iterator[str]:
    datasets = _import_datasets()
    options: dict[str, Any]
    if fmt == "jsonl":
        options = {"chunksize": _JSON_CHUNK}
    else:
        import pyarrow.dataset  # noqa: PLC0415  (imported with datasets, only when reading parquet)

        # Without pre-buffering, pyarrow fetches one row group at a time instead of all of them.
        scan = pyarrow.dataset.ParquetFragmentScanOptions(pre_buffer=False)
        options = {"columns": [text_field], "fragment_scan_options": scan}
    dataset = datasets.load_dataset(
        "json" if fmt == "jsonl" else "parquet",
        data_files=[local_location(url)],
        split="train",
        streaming=True,
        cache_dir=cache_dir,
        storage_options={
            "http": {"get_client": _fsspec_session},
            "https": {"get_client": _fsspec_session},
        },
        **options,
    )
    for example in dataset:
        if text_field not in example:
            raise DataError(f"shard {url} has no field {text_field!r} (fields: {sorted(example)})")
        text = example[text_field]
        if text is None:
            continue
        if not isinstance(text, str):
            raise DataError(
                f"shard {url}: field {text_field!r} holds {type(text).__name__}, not text"
            )
        yield text


async def _fsspec_session(**kwargs: Any) -> aiohttp.ClientSession:
    """fsspec's ``get_client``: our session (the system's trust store and proxies) with fsspec's
    options; fsspec calls it on its own loop, which aiohttp takes as the running one."""
    kwargs.pop("loop", None)
    timeout = kwargs.pop("timeout", _DATASETS_TIMEOUT)
    return client_session(timeout, **kwargs)


_DATASETS_TIMEOUT = aiohttp.ClientTimeout(
    total=None, sock_connect=_HTTP_TIMEOUT, sock_read=_HTTP_TIMEOUT
)


def _import_datasets() -> Any:
    # `datasets` (through huggingface_hub) reads its offline switches when first imported. Barnraise
    # only ever reads the URLs it is given, never the Hugging Face Hub, so turn the Hub off before
    # that import unless the user has decided otherwise. Imported here, not at the top, because the
    # import is slow and must come after these settings.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import datasets  # noqa: PLC0415

    return datasets


def _read_text(url: str) -> Iterator[str]:
    with _open_bytes(url) as raw:
        lines: TextIO
        if url_path(url).lower().endswith(".gz"):
            lines = io.TextIOWrapper(gzip.GzipFile(fileobj=raw, mode="rb"), encoding="utf-8")
        else:
            lines = io.TextIOWrapper(raw, encoding="utf-8")
        with lines:
            for line in lines:
                yield line.rstrip("\r\n")


def _open_bytes(url: str) -> BinaryIO:
    """The shard's bytes, from its server or its file; the caller closes it."""
    if is_remote(url):
        return open_url(url, timeout=_HTTP_TIMEOUT)
    return open(local_location(url), "rb")


def _describe(exc: BaseException) -> str:
    """A short reason for a read failure, for a message that already names the shard."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    tls = tls_problem(exc)
    if tls is not None:
        return tls
    if isinstance(exc, FileNotFoundError):
        # `datasets` reports an unreachable server the same way as a missing file.
        return "not found (missing, or its server cannot be reached)"
    reason = f"{type(exc).__name__}: {exc}"
    if len(reason) > _MAX_REASON:
        reason = reason[: _MAX_REASON - 1] + "…"
    return reason
