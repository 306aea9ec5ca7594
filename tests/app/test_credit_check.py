"""The statistics page's "Check my credit" box against the fake engine: a click shows the engine's
summary (and the first epochs that differ, with why); the button waits for the answer; a failure
shows in words, as an error."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.pages.statistics import StatisticsPage
from app.widgets.credit_check import CreditCheckBox, credit_text
from app.window import MainWindow
from core.api.schema import CreditCheck, CreditDifference
from core.api.testing import DEMO, FakeEngine
from core.api.testing.sample_data import matching_credit

CLICK = Qt.MouseButton.LeftButton
LATE = "not reported yet (the backbone reports an epoch a few seconds after it ends)"
MISSED = "not credited: the backbone never reported it for this peer, or the coordinator refused it"


def credit_box(window: MainWindow) -> CreditCheckBox:
    window.show_page("statistics")
    page = window.page["statistics"]
    assert isinstance(page, StatisticsPage)
    return page.credit


def check(box: CreditCheckBox, qtbot: QtBot) -> str:
    """Click the button, and wait for what the box shows."""
    qtbot.mouseClick(box.check_button, CLICK)
    qtbot.waitUntil(lambda: not box.result.isHidden() and not box.checking, timeout=10_000)
    return box.result.text()


def differing(count: int) -> CreditCheck:
    differences = [CreditDifference(10 + i, 128, 0, MISSED) for i in range(count - 1)]
    differences.append(CreditDifference(99, 64, 0, LATE))
    return CreditCheck(
        DEMO,
        "12D3KooWPeer",
        local_samples=128 * (count - 1) + 64,
        credited_samples=0,
        matches=False,
        differences=differences,
        summary="320 samples differ: made up for the test.",
        epochs=count,
        since=10,
    )


def test_a_click_shows_that_the_counts_match(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    box = credit_box(make_window(fake))
    assert box.result.isHidden()  # nothing asked yet
    assert box.check_button.text() == "Check my credit"
    qtbot.mouseClick(box.check_button, CLICK)
    # the answer cannot arrive in the turn that asked (the bridge delivers it in a later one)
    assert not box.check_button.isEnabled()
    assert box.check_button.text() == "Checking…"
    box.ask()  # asked again while checking: not a second call
    qtbot.waitUntil(box.check_button.isEnabled, timeout=10_000)
    assert box.check_button.text() == "Check my credit"
    assert box.result.text() == matching_credit(DEMO).summary
    assert box.result.text().startswith("Your counts match the project's: ")
    assert box.result.objectName() == ""  # an answer, not an error
    assert box.result.accessibleDescription() == box.result.text()
    assert box.check == matching_credit(DEMO)
    assert fake.calls.count("credit_check") == 1


def test_differences_show_the_first_few_with_their_reason(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    box = credit_box(make_window(fake))
    fake.set_credit(differing(5))
    assert check(box, qtbot).splitlines() == [
        "320 samples differ: made up for the test.",
        f"Epoch 10: 128 here, 0 credited: {MISSED}.",
        f"Epoch 11: 128 here, 0 credited: {MISSED}.",
        f"Epoch 12: 128 here, 0 credited: {MISSED}.",
        "…and 2 more epochs.",
    ]
    assert box.result.objectName() == ""
    fake.set_credit(None)
    assert check(box, qtbot).startswith("Your counts match")


def test_failures_show_in_words(
    make_window: Callable[..., MainWindow], fake: FakeEngine, qtbot: QtBot
) -> None:
    window = make_window(fake)
    box = credit_box(window)
    fake.coordinator.down = True
    assert check(box, qtbot).startswith("The project's server does not answer.")
    assert box.result.objectName() == "inlineError"
    assert box.check is None
    fake.coordinator.down = False
    qtbot.waitUntil(lambda: window.store.account is not None, timeout=5000)
    logged_out = window.store.logout()
    qtbot.waitUntil(lambda: logged_out.done, timeout=10_000)
    assert check(box, qtbot).startswith("Log in first: ")
    assert box.result.objectName() == "inlineError"


def test_the_check_in_words() -> None:
    late = differing(1)
    assert credit_text(late) == (
        f"320 samples differ: made up for the test.\nEpoch 99: 64 here, 0 credited: {LATE}."
    )
    assert credit_text(differing(4)).endswith("…and 1 more epoch.")
