"""New names against look-alikes (UTS #39 skeletons) and reserved names, through the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.coordinator import CoordinatorStore, ScryptParams, Username
from core.coordinator.errors import BadRequest, Conflict
from core.coordinator.people.confusables import Confusables

FAST = ScryptParams(n=2**10)
LOOK_ALIKES = [
    "ＡＬＩＣＥ",  # fullwidth
    "𝒶𝓁𝒾𝒸ℯ",  # mathematical script
    "ALİCE",  # capital I with dot above: folds to i + U+0307
    "\u0430lice",  # Cyrillic a
    "a1ice",
    "al\u0131ce",  # dotless i
    "Alice",
]


def test_the_table_is_loaded_and_skeletons_meet() -> None:
    table = Confusables.load()
    assert len(table) > 1000
    skeleton = table.skeleton(Username.parse("alice").key)
    for name in LOOK_ALIKES:
        assert table.skeleton(Username.parse(name).key) == skeleton, name
    # names of other scripts keep their own skeletons, and differ from each other
    others = ["সাহানা", "দীপা", "Σωκράτης", "日本語", "józef", "jozef9"]
    assert len({table.skeleton(Username.parse(n).key) for n in others}) == len(others)


@pytest.mark.parametrize("name", LOOK_ALIKES)
def test_look_alikes_of_a_taken_name_are_refused(tmp_path: Path, name: str) -> None:
    with CoordinatorStore(tmp_path / "c.db") as store:
        store.add_user("alice", "correct horse battery", params=FAST)
        with pytest.raises(Conflict, match=r"taken|looks too much like"):
            store.accounts.check_new(Username.parse(name), signup=True)
        if Username.parse(name).key != "alice":  # a true look-alike, not a spelling of alice
            with pytest.raises(Conflict):
                store.add_user(name, params=FAST)
        assert [u.name for u in store.users()] == ["alice"]


def test_long_s_folds_to_s() -> None:
    # U+017F folds to "s": "alice" + long s is the name "alices", not "alice"
    assert Username.parse("alice\u017f").key == Username.parse("ALICES").key == "alices"


def test_dots_and_reserved_names_are_no_new_names(tmp_path: Path) -> None:
    with CoordinatorStore(tmp_path / "c.db") as store:
        for name in (".", "..", "...", "-", "_._"):
            with pytest.raises(BadRequest, match="letter or digit"):
                store.accounts.check_new(Username.parse(name), signup=True)
            with pytest.raises(BadRequest, match="letter or digit"):
                store.add_user(name)
        for name in ("admin", "ADMIN", "\u0430dmin", "Moderator", "r00t"):
            with pytest.raises(BadRequest, match="reserved"):
                store.accounts.check_new(Username.parse(name), signup=True)
        store.add_user("organizer", moderator=True)  # moderators may add reserved names
        store.accounts.check_new(Username.parse("zoë"), signup=True)  # a fine name passes
