"""TryModelBox: "Try the model", a sentence typed for the active project's model, and its answer.

A masked model guesses the missing word (``[MASK]`` or ``___``): its top guesses with their
percentages, and the sentence with the best one filled in; a causal model completes the text. When
the model cannot answer (no project, not here yet, ...) the engine's reason is shown in its place.
The question goes through the store like any command, and the Ask button waits for its answer.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QPushButton, QWidget

from app import wording
from app.engine.store import EngineStore
from app.errors import explain
from app.theme import show_inline
from app.widgets.tiles import Card
from core.api.errors import ApiError
from core.api.schema import QUESTION_LIMIT, ModelAnswer

PLACEHOLDER = "The cat sat on the ___.  (___ or [MASK] marks the word to guess)"
ASK = "Ask"
ASKING = "Asking…"


def percent(share: float) -> str:
    return "under 1 %" if share < 0.005 else f"{share * 100:.0f} %"


def answer_text(answer: ModelAnswer, now: float) -> str:
    """The answer in plain text, a few lines; or why there is none."""
    if not answer.answered:
        return answer.reason or "The model cannot answer now."
    lines: list[str] = []
    if answer.kind == "causal":
        lines.append(f"The model continues: {answer.text}")
    else:
        guesses = ", ".join(f"{g.word} ({percent(g.probability)})" for g in answer.guesses)
        lines.append(f"Its guesses: {guesses}")
        lines.append(f"Best guess: {answer.text}")
    source = f"epoch {answer.epoch}" if answer.epoch is not None else "the latest epoch"
    when = f", copied {wording.ago(answer.copied_at, now)}" if answer.copied_at is not None else ""
    lines.append(f"From this computer's copy of the model at {source}{when}.")
    return "\n".join(lines)


class TryModelBox(Card):
    def __init__(self, store: EngineStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.setAccessibleName("Try the model")
        self.box.addWidget(QLabel("<b>Try the model</b>"))
        self.box.addWidget(
            QLabel(
                "Type a sentence with a missing word, and the project's model, as this computer "
                "holds it now, guesses the word (a model that writes text continues yours).",
                objectName="caption",
                wordWrap=True,
            )
        )
        row = QHBoxLayout()
        self.question = QLineEdit(placeholderText=PLACEHOLDER, maxLength=QUESTION_LIMIT)
        self.question.setToolTip(
            "A sentence for the model, with ___ or [MASK] where a word is missing"
        )
        self.question.setAccessibleName("Sentence for the model")
        self.ask_button = QPushButton(ASK)
        self.ask_button.setToolTip("Ask the project's model to guess the missing word")
        self.ask_button.setAccessibleName("Ask the model")
        row.addWidget(self.question, 1)
        row.addWidget(self.ask_button)
        self.box.addLayout(row)
        self.result = QLabel(wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.result.setAccessibleName("The model's answer")
        self.result.hide()
        self.box.addWidget(self.result)
        self.answer: ModelAnswer | None = None
        self.asking = False
        self.ask_button.clicked.connect(self.ask)
        self.question.returnPressed.connect(self.ask)

    def ask(self) -> None:
        if self.asking:  # Enter while the last question is still out
            return
        self._busy(True)
        call = self.store.try_model(self.question.text())
        call.succeeded.connect(self.show_answer)
        call.failed.connect(self._failed)
        call.finished.connect(lambda: self._busy(False))

    def show_answer(self, answer: ModelAnswer) -> None:
        self.answer = answer
        show_inline(self.result, answer_text(answer, time.time()), error=not answer.answered)

    def _failed(self, error: ApiError) -> None:
        self.answer = None
        show_inline(self.result, explain(error, "asking the model"), error=True)

    def _busy(self, busy: bool) -> None:
        self.asking = busy
        self.ask_button.setEnabled(not busy)
        self.ask_button.setText(ASKING if busy else ASK)
