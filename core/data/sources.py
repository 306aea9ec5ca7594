"""Where training text comes from: ``DataSource`` and the rules for reading its shard URLs.

A source is a list of shard URLs (local paths, ``file://`` or ``http(s)://``) in one of three formats
and a weight for mixing it with other sources. The format is usually inferred from each URL's suffix.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

from core.data.errors import DataError

FORMATS = ("jsonl", "parquet", "text")

# Longest suffixes first so that ".jsonl.gz" is not mistaken for something ending in ".gz".
_SUFFIX_FORMATS = (
    (".jsonl.gz", "jsonl"),
    (".json.gz", "jsonl"),
    (".jsonl", "jsonl"),
    (".parquet", "parquet"),
    (".txt.gz", "text"),
    (".txt", "text"),
)


def infer_format(url: str) -> str | None:
    """The format named by the URL's suffix (query and fragment ignored), or None if unknown."""
    lowered = url_path(url).lower()
    for suffix, fmt in _SUFFIX_FORMATS:
        if lowered.endswith(suffix):
            return fmt
    return None


def url_path(url: str) -> str:
    """The part of a URL that names the file: without scheme, host, query or fragment."""
    return urlsplit(url).path if "://" in url else url


def is_remote(url: str) -> bool:
    """Whether the URL must be fetched over HTTP(S) rather than opened from disk."""
    return url.lower().startswith(("http://", "https://"))


def local_location(url: str) -> str:
    """The URL as `datasets` and ``open`` want it: a plain path for local files, else unchanged."""
    if url.lower().startswith("file://"):
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise DataError(f"cannot open {url}: file:// URLs must not name a host")
        return url2pathname(unquote(parts.path))
    if is_remote(url):
        return url
    return str(Path(url).expanduser())


@dataclass(frozen=True)
class DataSource:
    """One body of training text: its shard URLs, mixing weight, format and text column."""

    urls: tuple[str, ...]
    weight: float = 1.0
    format: str = "auto"  # jsonl | parquet | text | auto (from each URL's suffix)
    text_field: str = "text"  # the column holding the text in jsonl and parquet shards

    def __post_init__(self) -> None:
        # Accept any sequence of URLs (a list from a config file, say) but store a tuple, so that the
        # frozen source stays hashable and cannot change under a running stream.
        given: object = self.urls  # typed as a tuple, but configs and callers may pass anything
        if isinstance(given, str) or not isinstance(given, Iterable):
            raise DataError(f"DataSource urls must be a list of URLs, got {given!r}")
        urls = tuple(given)
        if not urls:
            raise DataError("a DataSource needs at least one shard URL")
        for url in urls:
            if not isinstance(url, str) or not url.strip():
                raise DataError(f"a DataSource URL must be a non-empty string, got {url!r}")
        object.__setattr__(self, "urls", urls)
        if not (isinstance(self.weight, int | float) and math.isfinite(self.weight)):
            raise DataError(f"a DataSource weight must be a finite number, got {self.weight!r}")
        if self.weight <= 0:
            raise DataError(f"a DataSource weight must be positive, got {self.weight}")
        if self.format != "auto" and self.format not in FORMATS:
            raise DataError(
                f"unknown DataSource format {self.format!r}; use one of {', '.join(FORMATS)} or auto"
            )
        if self.format == "auto":
            for url in self.urls:
                if infer_format(url) is None:
                    known = ", ".join(suffix for suffix, _ in _SUFFIX_FORMATS)
                    raise DataError(
                        f"cannot tell the format of {url} from its name (known: {known}); "
                        "set the source's format explicitly"
                    )
        if not self.text_field:
            raise DataError("a DataSource text_field must not be empty")

    def format_of(self, url: str) -> str:
        """The format used to read ``url``, one of ``FORMATS``."""
        if self.format != "auto":
            return self.format
        fmt = infer_format(url)
        if fmt is None:  # unreachable for URLs of this source: __post_init__ checked them
            raise DataError(f"cannot tell the format of {url} from its name")
        return fmt
