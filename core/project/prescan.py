"""A quick look at a manifest's text before ``tomllib`` reads it: how deep it could nest.

``tomllib`` spends time and memory quadratic in the number of parts of a dotted key (a key of
16,000 parts takes it seconds and a gigabyte), and reads nested arrays and inline tables
recursively. ``nesting`` measures both on the raw text in one linear pass, skipping strings and
comments as TOML does, so a manifest that could only be an attack is refused before it costs
anything. It counts generously (a float's dot may start a chain of dots; a table header's
brackets count as nesting): it is a guard, and a real manifest is far below any sensible limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+:")


@dataclass(frozen=True)
class Nesting:
    brackets: int
    """The deepest nesting of ``[`` and ``{`` outside strings and comments."""
    dots: int
    """The most dots in one chain of key-like words (``a.b."c".d`` has 3)."""


def nesting(text: str) -> Nesting:
    """The deepest brackets and the longest chain of dots in ``text``, strings and comments
    skipped."""
    depth = deepest = 0
    dots = most = 0
    last = ""
    for token in _tokens(text):
        if token == "." and last == "word":
            dots += 1  # the chain goes on
            most = max(most, dots)
        elif token == "word":
            if last != ".":
                dots = 0  # a new chain starts
        else:
            dots = 0
            if token in "[{":
                depth += 1
                deepest = max(deepest, depth)
            elif token in "]}":
                depth = max(depth - 1, 0)
        last = token
    return Nesting(deepest, most)


def _tokens(text: str) -> Iterator[str]:
    """``"word"`` for a bare word or a string, else each character outside comments and blanks."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t":
            i += 1
        elif c in "\"'":
            i = _past_string(text, i)
            yield "word"
        elif c in _BARE:
            while i < n and text[i] in _BARE:
                i += 1
            yield "word"
        elif c == "#":
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
        else:
            i += 1
            yield c


def _past_string(text: str, start: int) -> int:
    """The index just past the string starting at ``start`` (or the end of its line, or of
    the text, when it is not closed: ``tomllib`` refuses that anyway)."""
    quote = text[start]
    triple = text.startswith(quote * 3, start)
    i = start + (3 if triple else 1)
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\" and quote == '"':
            i += 2  # an escape: the next character cannot close the string
            continue
        if triple:
            if text.startswith(quote * 3, i):
                i += 3
                # up to two more quotes belong to the string's content (TOML allows them)
                for _ in range(2):
                    if i < n and text[i] == quote:
                        i += 1
                return i
        elif c == quote:
            return i + 1
        elif c == "\n":
            return i
        i += 1
    return n
