"""The table of training modes in force: ``MODES`` unless a caller puts another in force for a
while.

What a manifest accepts, what ``--mode`` offers, what the engine estimates and shows, what the
project page says and which training code a peer runs are all looked up here, so that a table with
one more mode (``with_mode``) reaches every one of them. The table in force is a context variable:
``using_modes`` sets it for a ``with`` block and restores it after, in this thread and the tasks
started inside the block only, so nothing leaks between tests or into other work.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from core.modes.builtin import MODES
from core.modes.table import ModeTable

_IN_FORCE: ContextVar[ModeTable] = ContextVar("mode_table", default=MODES)


def active_modes() -> ModeTable:
    return _IN_FORCE.get()


@contextmanager
def using_modes(table: ModeTable) -> Iterator[ModeTable]:
    token = _IN_FORCE.set(table)
    try:
        yield table
    finally:
        _IN_FORCE.reset(token)
