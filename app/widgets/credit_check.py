"""CreditCheckBox: "Check my credit", this computer's own count of its work beside the project's.

The engine keeps, epoch by epoch, the samples this computer's peer landed; the project's
coordinator keeps what it credited to this computer's key. One click asks the engine to set the two
side by side: the result line is its summary, and the first few epochs that differ with their
reason. The question goes through the store like any command, the button waits for its answer, and
a failure (no coordinator, not logged in, the coordinator down) shows in the engine's words.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

from app.engine.store import EngineStore
from app.errors import explain
from app.theme import show_inline
from app.widgets.tiles import Card
from core.api.errors import ApiError
from core.api.schema import CreditCheck

CHECK = "Check my credit"
CHECKING = "Checking…"
DIFFERENCES_SHOWN = 3
"""Differing epochs listed under the summary (``barnraise ctl credit --json`` lists them all)."""


def credit_text(check: CreditCheck) -> str:
    """The summary, and the first few epochs that differ, one line each."""
    lines = [check.summary]
    for d in check.differences[:DIFFERENCES_SHOWN]:
        lines.append(f"Epoch {d.epoch}: {d.local:,} here, {d.credited:,} credited: {d.reason}.")
    more = len(check.differences) - DIFFERENCES_SHOWN
    if more > 0:
        lines.append(f"…and {more:,} more epoch{'' if more == 1 else 's'}.")
    return "\n".join(lines)


class CreditCheckBox(Card):
    def __init__(self, store: EngineStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.setAccessibleName("Check my credit")
        row = QHBoxLayout()
        row.addWidget(
            QLabel(
                "Does the project credit all of this computer's work? Compare this computer's "
                "own count of its epochs with what the project's coordinator credited.",
                objectName="caption",
                wordWrap=True,
            ),
            1,
        )
        self.check_button = QPushButton(CHECK)
        self.check_button.setToolTip(
            "Compare this computer's count of its epochs with the project's credit"
        )
        self.check_button.setAccessibleName(CHECK)
        row.addWidget(self.check_button)
        self.box.addLayout(row)
        self.result = QLabel(wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.result.setAccessibleName("The credit check's result")
        self.result.hide()
        self.box.addWidget(self.result)
        self.check: CreditCheck | None = None
        self.checking = False
        self.check_button.clicked.connect(self.ask)

    def ask(self) -> None:
        if self.checking:
            return
        self._busy(True)
        call = self.store.credit_check()
        call.succeeded.connect(self.show_check)
        call.failed.connect(self._failed)
        call.finished.connect(lambda: self._busy(False))

    def show_check(self, check: CreditCheck) -> None:
        self.check = check
        show_inline(self.result, credit_text(check), error=False)

    def _failed(self, error: ApiError) -> None:
        self.check = None
        show_inline(self.result, explain(error, "checking your credit"), error=True)

    def _busy(self, busy: bool) -> None:
        self.checking = busy
        self.check_button.setEnabled(not busy)
        self.check_button.setText(CHECKING if busy else CHECK)
