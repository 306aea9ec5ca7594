"""Letting a closed asyncio transport be freed at once rather than by the cyclic collector.

asyncio's selector transports keep bound methods of themselves (``_read_ready_cb``; since 3.12 also
``_write_ready``), reference cycles that outlive the connection. 3.12 clears them in ``close()`` but
not in ``abort()``, and 3.11 never does. One connection's transport is a few objects, but a flood
drops thousands a second, and garbage that waits for the collector's rare full pass grows the heap
and leaves it fragmented after the flood (``benchmarks/net/flood.py``). ``forget_callbacks`` does what
3.12's ``close()`` does, once the transport has told its protocol it is gone.
"""

from __future__ import annotations

import asyncio

_SELF_REFERENCES = ("_read_ready_cb", "_write_ready")


def forget_callbacks(transport: asyncio.BaseTransport) -> None:
    """Drop a closed ``transport``'s references to its own methods (a no-op on other transports)."""
    if not transport.is_closing():
        return
    attributes = getattr(transport, "__dict__", {})
    for name in _SELF_REFERENCES:
        if name in attributes:  # set on the instance: a bound method; a class's own is no cycle
            attributes[name] = None
