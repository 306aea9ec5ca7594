"""The codec table in force: ``CODECS`` unless a caller puts another in force for a while.

What a manifest accepts, what the engine costs, what the expert call's wire takes and which codec
a peer averages with are all looked up here, so that a table with one more codec (``with_codec``)
reaches every one of them. The table in force is a context variable: ``using_codecs`` sets it for
a ``with`` block and restores it after, in this thread and the tasks started inside the block only,
so nothing leaks between tests or into other work.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from core.codecs.builtin import CODECS
from core.codecs.table import CodecTable

_IN_FORCE: ContextVar[CodecTable] = ContextVar("codec_table", default=CODECS)


def active_codecs() -> CodecTable:
    return _IN_FORCE.get()


@contextmanager
def using_codecs(table: CodecTable) -> Iterator[CodecTable]:
    token = _IN_FORCE.set(table)
    try:
        yield table
    finally:
        _IN_FORCE.reset(token)
