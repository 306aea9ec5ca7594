"""Letting a closed asyncio transport be freed at once rather than by the cyclic collector.

Python 3.11's selector transports keep a bound method of themselves (``_read_ready_cb``), a
reference cycle that outlives the connection; 3.12 clears it in ``close()`` but not in ``abort()``.
One connection's transport is a few objects, but a flood drops thousands a second, and garbage that
waits for the collector's rare full pass grows the heap and leaves it fragmented after the flood
(``benchmarks/flood.py``). ``forget_callbacks`` does what 3.12's ``close()`` does, once the
transport has told its protocol it is gone.
"""

from __future__ import annotations

import asyncio


def forget_callbacks(transport: asyncio.BaseTransport) -> None:
    """Drop a closed ``transport``'s references to its own methods (a no-op on other transports)."""
    if transport.is_closing() and hasattr(transport, "_read_ready_cb"):
        transport._read_ready_cb = None
