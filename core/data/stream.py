"""An endless, shuffled, weighted mix of texts from several sources: ``stream_texts``.

Each source is read in passes. A pass visits every shard of the source once, in an order drawn from
the peer's seed and the pass number, so peers with different seeds read different shards at any
moment and no two passes repeat an order. Texts go through a shuffle buffer that is emptied at the
end of each pass, so every pass yields each text exactly once. The sources are mixed by drawing, for
every text, a source with probability proportional to its weight.

We permute shards and shuffle ourselves rather than use ``IterableDataset.shuffle`` and
``interleave_datasets``: those read up to ten shards at once and hide which shard failed, while here
one shard per source is open at a time and a failure names its URL. `datasets` still does the
streaming itself (see ``readers``).

Reading blocks the calling thread (on disk or network): iterate from a worker thread, never from an
event loop's thread.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import shutil
import tempfile
from collections.abc import Generator, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import psutil

from core.data.errors import DataError
from core.data.readers import read_shard
from core.data.sources import DataSource

log = logging.getLogger(__name__)

_MIX_STREAM = 0x6D6978  # keeps the mixing draws independent of every source's own draws
_DRAWS_AT_ONCE = 1024  # source choices drawn per numpy call, for speed


def stream_texts(
    sources: Sequence[DataSource], *, seed: int, shuffle_buffer: int = 10_000
) -> Iterator[str]:
    """Yield texts from ``sources`` forever: shuffled, mixed by weight, empty texts skipped.

    The sequence depends only on the data and ``seed`` (a non-negative int); ``shuffle_buffer`` is the
    number of texts held for shuffling within a source, 0 for none (shards are still permuted).
    Raises ``DataError`` for bad arguments at once, and while iterating when a shard cannot be read
    or a whole pass over a source finds no text.
    """
    sources = tuple(sources)
    if not sources:
        raise DataError("no data sources given")
    for source in sources:
        if not isinstance(source, DataSource):
            raise DataError(f"expected a DataSource, got {type(source).__name__}")
    if not _is_count(seed):
        raise DataError(f"the data seed must be a non-negative integer, got {seed!r}")
    if not _is_count(shuffle_buffer):
        raise DataError(f"shuffle_buffer must be a non-negative integer, got {shuffle_buffer!r}")
    return _mix(sources, seed, shuffle_buffer)


def _scratch_folder() -> tempfile.TemporaryDirectory[str]:
    """A temporary folder named after this process; folders of processes that died without
    cleaning up (SIGKILL, power loss) are removed on the way."""
    root = Path(tempfile.gettempdir())
    for stale in root.glob("barnraise-stream-*-*"):
        pid = stale.name.split("-")[2]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    return tempfile.TemporaryDirectory(
        prefix=f"barnraise-stream-{os.getpid()}-", ignore_cleanup_errors=True
    )


def _mix(sources: tuple[DataSource, ...], seed: int, shuffle_buffer: int) -> Iterator[str]:
    # `datasets` leaves an empty lock file in its cache folder for every shard it opens, even when
    # streaming; give it a folder of ours that goes away with the stream.
    scratch = _scratch_folder()
    streams = [
        _passes(
            source, seed=seed, index=index, shuffle_buffer=shuffle_buffer, cache_dir=scratch.name
        )
        for index, source in enumerate(sources)
    ]
    weights = np.array([source.weight for source in sources], dtype=np.float64)
    probabilities = weights / weights.sum()
    rng = np.random.default_rng([seed, _MIX_STREAM])
    try:
        while True:
            for choice in rng.choice(len(streams), size=_DRAWS_AT_ONCE, p=probabilities):
                yield next(streams[choice])  # sources are endless: no StopIteration here
    finally:
        # Close the readers now (open files and HTTP responses) rather than when collected.
        for stream in streams:
            stream.close()
        scratch.cleanup()


def _passes(
    source: DataSource, *, seed: int, index: int, shuffle_buffer: int, cache_dir: str
) -> Generator[str, None, None]:
    """Every text of one source, pass after pass, each pass in a new order."""
    for epoch in itertools.count():
        rng = np.random.default_rng([seed, index, epoch])
        order = [source.urls[int(i)] for i in rng.permutation(len(source.urls))]
        log.debug("source %d pass %d: shards in order %s", index, epoch, order)
        texts: Iterator[str] = _texts_of(source, order, cache_dir)
        if shuffle_buffer > 0:
            texts = _buffer_shuffle(texts, shuffle_buffer, random.Random(int(rng.integers(2**63))))
        count = 0
        for text in texts:
            count += 1
            yield text
        if count == 0:
            raise DataError(f"a whole pass over {_name(source)} found no text")


def _texts_of(source: DataSource, urls: Iterable[str], cache_dir: str) -> Iterator[str]:
    for url in urls:
        fmt = source.format_of(url)
        for text in read_shard(url, fmt=fmt, text_field=source.text_field, cache_dir=cache_dir):
            if text.strip():
                yield text


def _buffer_shuffle(items: Iterator[str], size: int, rng: random.Random) -> Iterator[str]:
    """Shuffle a stream through a buffer of ``size``: each new item takes a random held item's place.

    The buffer is emptied, in random order, when ``items`` ends, so the output is a permutation.
    """
    buffer: list[str] = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        slot = rng.randrange(size)
        yield buffer[slot]
        buffer[slot] = item
    rng.shuffle(buffer)
    yield from buffer


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _name(source: DataSource) -> str:
    first = source.urls[0]
    return first if len(source.urls) == 1 else f"{first} and {len(source.urls) - 1} more shards"
