"""The installed Qt binding must not leak references on signal emission.

PySide6 6.12.0 drops a reference to True or False on every emission and aborts the interpreter after
about a thousand (the desktop app emits that many in minutes); the dependency pin excludes it. This
measures the drift over a hundred emissions, too few to crash, enough to see.
"""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Signal


class _Sender(QObject):
    plain = Signal()
    carrying = Signal(object)


def test_signal_emission_keeps_reference_counts() -> None:
    sender = _Sender()
    received: list[object] = []
    sender.plain.connect(lambda: received.append(None))
    sender.carrying.connect(received.append)
    before = [sys.getrefcount(x) for x in (None, True, False)]
    for _ in range(100):
        sender.plain.emit()
        sender.carrying.emit(object())
    received.clear()
    after = [sys.getrefcount(x) for x in (None, True, False)]
    assert after == before, f"references to None, True, False drifted: {before} -> {after}"
