"""Usernames and passwords as they arrive: checked, normalised, and never shown back.

A username is 1 to 64 characters after NFC normalisation, each a letter or digit of any script
(``str.isalnum``), a combining mark after one (Bengali and Devanagari vowel signs are marks, and a
sahajBERT-style project must accept its volunteers' names), or one of ``._-``. Anything else is
refused with the reason, quoting at most the offending character (never a 10,000-character name).

Two names are the same account when their keys match: the key is NFKC-normalised and case-folded
(``alice`` in fullwidth or mathematical script letters is ``alice``). The name shown on the
leaderboard and put in passes is the NFKC form as the user cased it. A *new* name must also keep
its characters under NFKC, hold at least one letter or digit (``.`` and ``..`` are no names), and,
checked where the accounts are (``accounts``), not look like a taken or reserved name
(``confusables``).

Before schema 2 the key was only NFC-normalised and case-folded (``legacy_key``); a name stored
under such a key keeps logging in by it (``Accounts.find`` tries the key, then the legacy key).

A password is 8 to 1024 characters (NFC-normalised, so the same password typed on two systems is
the same bytes). ``Password`` keeps it out of reprs, logs and tracebacks' argument lists.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from core.coordinator.errors import BadRequest
from core.trust.passes import MAX_USERNAME_CHARS

NAME_PUNCTUATION = "._-"
MIN_PASSWORD_CHARS = 8
MAX_PASSWORD_CHARS = 1024


@dataclass(frozen=True, slots=True)
class Username:
    name: str
    """As the user wrote it, NFKC-normalised (NFC where NFKC would break the rules: legacy names)."""
    key: str
    """NFKC-normalised and case-folded: what makes two names the same one (the store's key)."""
    legacy_key: str
    """The key of schema 1 (NFC and case-folded), under which older accounts may be stored."""

    @classmethod
    def parse(cls, raw: object) -> Username:
        """Check and normalise ``raw``; ``BadRequest`` says what is wrong with it."""
        if not isinstance(raw, str):
            raise BadRequest("the username must be a string")
        # Refuse absurd lengths before normalising: NFC of a huge string is wasted work.
        if len(raw) > 4 * MAX_USERNAME_CHARS:
            raise BadRequest(f"a username has at most {MAX_USERNAME_CHARS} characters")
        nfc = unicodedata.normalize("NFC", raw)
        _check_characters(nfc)
        compatible = unicodedata.normalize("NFKC", nfc)
        name = compatible if _problem(compatible) is None else nfc
        return cls(name, fold(compatible), unicodedata.normalize("NFC", nfc.casefold()))

    def check_new(self) -> None:
        """``BadRequest`` unless this may be the name of a new account (on top of ``parse``)."""
        if self.name != unicodedata.normalize("NFKC", self.name):
            raise BadRequest(
                "a new username may not hold characters that change under compatibility "
                "normalisation into ones a name may not have"
            )
        if not any(char.isalnum() for char in self.name):
            raise BadRequest("a username needs at least one letter or digit")


def fold(text: str) -> str:
    """NFKC case folding: the key two spellings of one name share."""
    once = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    # Folding can expose compatibility characters again (rarely): one more round settles them.
    return unicodedata.normalize("NFKC", once.casefold())


def _check_characters(name: str) -> None:
    problem = _problem(name)
    if problem is not None:
        raise BadRequest(problem)


def _problem(name: str) -> str | None:
    if not name:
        return "the username is empty"
    if len(name) > MAX_USERNAME_CHARS:
        return f"a username has at most {MAX_USERNAME_CHARS} characters (got {len(name)})"
    for index, char in enumerate(name):
        mark = index > 0 and unicodedata.category(char).startswith("M")
        if not (char.isalnum() or mark or char in NAME_PUNCTUATION):
            return f"a username may only contain letters, digits, '.', '_' and '-' (not {char!a})"
    return None


class Password:
    """A password that will not print itself."""

    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        self._text = text

    @classmethod
    def parse(cls, raw: object) -> Password:
        if not isinstance(raw, str):
            raise BadRequest("the password must be a string")
        if len(raw) > 4 * MAX_PASSWORD_CHARS:
            raise BadRequest(f"a password has at most {MAX_PASSWORD_CHARS} characters")
        text = unicodedata.normalize("NFC", raw)
        if not MIN_PASSWORD_CHARS <= len(text) <= MAX_PASSWORD_CHARS:
            raise BadRequest(
                f"a password has {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters"
            )
        return cls(text)

    def encode(self) -> bytes:
        """The bytes that are hashed (UTF-8)."""
        return self._text.encode("utf-8", "surrogatepass")

    def __repr__(self) -> str:
        return "Password(<hidden>)"

    __str__ = __repr__
