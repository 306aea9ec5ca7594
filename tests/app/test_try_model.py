"""The statistics page's "Try the model" box against the fake engine: a sentence typed and asked
shows the model's guesses with percentages and the sentence filled in (or a causal model's
completion); the button waits for the answer; an answer that is no answer shows its reason, and a
question the engine refuses shows its words."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.pages.statistics import StatisticsPage
from app.widgets.try_model import TryModelBox, answer_text
from app.window import MainWindow
from core.api.schema import Guess, ModelAnswer
from core.api.testing import DEMO, FakeEngine
from core.api.testing.model import NO_MASK, answer

CLICK = Qt.MouseButton.LeftButton
QUESTION = "The cat sat on the ___."


def try_box(window: MainWindow) -> TryModelBox:
    window.show_page("statistics")
    page = window.page["statistics"]
    assert isinstance(page, StatisticsPage)
    return page.try_model


def ask(box: TryModelBox, qtbot: QtBot, text: str) -> str:
    """Type ``text``, click Ask, and wait for what the box shows."""
    box.question.clear()
    qtbot.keyClicks(box.question, text)
    qtbot.mouseClick(box.ask_button, CLICK)
    qtbot.waitUntil(lambda: not box.result.isHidden() and not box.asking, timeout=10_000)
    return box.result.text()


def test_asking_shows_the_guesses_and_the_sentence_filled_in(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    box = try_box(make_window(fake))
    assert box.result.isHidden()  # nothing asked yet
    assert "___" in box.question.placeholderText()
    assert "[MASK]" in box.question.placeholderText()
    shown = ask(box, qtbot, QUESTION)
    expected = answer(DEMO, QUESTION, "masked", epoch=0, now=time.time())
    best = expected.guesses[0].word
    lines = shown.splitlines()
    assert lines[0] == "Its guesses: " + ", ".join(
        f"{g.word} ({round(g.probability * 100)} %)" for g in expected.guesses
    )
    assert lines[1] == f"Best guess: The cat sat on the {best}."
    assert box.answer is not None
    assert lines[2].startswith(
        f"From this computer's copy of the model at epoch {box.answer.epoch}"
    )
    assert box.answer.guesses == expected.guesses
    assert box.result.objectName() == ""  # an answer, not an error
    assert box.result.accessibleDescription() == shown
    assert fake.calls.count("try_model") == 1


def test_the_button_waits_for_the_answer(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    box = try_box(make_window(fake))
    qtbot.keyClicks(box.question, QUESTION)
    qtbot.mouseClick(box.ask_button, CLICK)
    # the answer cannot arrive in the turn that asked (the bridge delivers it in a later one)
    assert not box.ask_button.isEnabled()
    assert box.ask_button.text() == "Asking…"
    qtbot.keyClick(box.question, Qt.Key.Key_Return)  # Enter while asking: not a second question
    qtbot.waitUntil(box.ask_button.isEnabled, timeout=10_000)
    assert box.ask_button.text() == "Ask"
    assert fake.calls.count("try_model") == 1
    qtbot.keyClick(box.question, Qt.Key.Key_Return)  # Enter asks too
    qtbot.waitUntil(lambda: fake.calls.count("try_model") == 2, timeout=10_000)


def test_a_model_that_cannot_answer_says_why(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    box = try_box(make_window(fake))
    reason = "The model is not here yet: it is loaded when this computer starts contributing."
    fake.refuse_model("not_ready", reason)
    assert ask(box, qtbot, QUESTION) == reason
    assert box.result.objectName() == "inlineError"
    fake.refuse_model(None)
    assert ask(box, qtbot, QUESTION).startswith("Its guesses: ")
    assert box.result.objectName() == ""


def test_without_a_project_it_says_so(
    make_window: Callable[..., MainWindow], fresh: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fresh)
    page = window.page["statistics"]
    assert isinstance(page, StatisticsPage)
    assert ask(page.try_model, qtbot, QUESTION).startswith("No project is attached")


def test_a_question_the_engine_refuses_shows_its_words(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    box = try_box(make_window(fake))
    shown = ask(box, qtbot, "The cat sat on the mat.")
    assert shown == f"{NO_MASK[0].upper()}{NO_MASK[1:]}."  # the engine's words, as a sentence
    assert box.result.objectName() == "inlineError"
    assert box.answer is None
    assert ask(box, qtbot, "   ") == "Type a sentence for the model first."


def test_a_causal_model_completes_the_text(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    fake.model_kind = "causal"
    box = try_box(make_window(fake))
    shown = ask(box, qtbot, "The volunteers")
    assert shown.splitlines()[0].startswith("The model continues: The volunteers ")
    assert box.answer is not None
    assert box.answer.completion in shown


def test_the_answer_in_words() -> None:
    now = 1_700_000_000.0
    guesses = [Guess("river", 0.5), Guess("sea", 0.004)]
    masked = ModelAnswer("p", "answered", kind="masked", guesses=guesses, text="a river")
    assert answer_text(masked, now).splitlines() == [
        "Its guesses: river (50 %), sea (under 1 %)",
        "Best guess: a river",
        "From this computer's copy of the model at the latest epoch.",
    ]
    copied = ModelAnswer("p", "answered", kind="causal", text="a b", epoch=3, copied_at=now - 120)
    assert answer_text(copied, now).splitlines() == [
        "The model continues: a b",
        "From this computer's copy of the model at epoch 3, copied 2 min ago.",
    ]
    assert answer_text(ModelAnswer("p", "unloaded", "Gone."), now) == "Gone."
