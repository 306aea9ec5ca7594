"""Usernames and passwords as they arrive: checked, normalised, and never shown back.

A username is 1 to 64 characters after NFC normalisation, each a letter or digit of any script
(``str.isalnum``), a combining mark after one (Bengali and Devanagari vowel signs are marks, and a
sahajBERT-style project must accept its volunteers' names), or one of ``._-``. Names are unique
without regard to case: the store's key is the case-folded form, while the name as the user wrote
it is what others see. Anything else is refused with the reason, quoting at most the offending
character (never a 10,000-character name).

A password is 8 to 1024 characters (NFC-normalised, so the same password typed on two systems is
the same bytes). ``Password`` keeps it out of reprs, logs and tracebacks' argument lists.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from core.coordinator.errors import BadRequest
from core.net.passes import MAX_USERNAME_CHARS

NAME_PUNCTUATION = "._-"
MIN_PASSWORD_CHARS = 8
MAX_PASSWORD_CHARS = 1024


@dataclass(frozen=True, slots=True)
class Username:
    name: str
    """NFC-normalised, as the user wrote it: shown on the leaderboard and put in passes."""
    key: str
    """Case-folded: what makes two names the same one (the store's primary key)."""

    @classmethod
    def parse(cls, raw: object) -> Username:
        """Check and normalise ``raw``; ``BadRequest`` says what is wrong with it."""
        if not isinstance(raw, str):
            raise BadRequest("the username must be a string")
        # Refuse absurd lengths before normalising: NFC of a huge string is wasted work.
        if len(raw) > 4 * MAX_USERNAME_CHARS:
            raise BadRequest(f"a username has at most {MAX_USERNAME_CHARS} characters")
        name = unicodedata.normalize("NFC", raw)
        if not name:
            raise BadRequest("the username is empty")
        if len(name) > MAX_USERNAME_CHARS:
            raise BadRequest(
                f"a username has at most {MAX_USERNAME_CHARS} characters (got {len(name)})"
            )
        for index, char in enumerate(name):
            mark = index > 0 and unicodedata.category(char).startswith("M")
            if not (char.isalnum() or mark or char in NAME_PUNCTUATION):
                raise BadRequest(
                    f"a username may only contain letters, digits, '.', '_' and '-' (not {char!a})"
                )
        return cls(name, unicodedata.normalize("NFC", name.casefold()))


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
