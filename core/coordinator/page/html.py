"""Building HTML from escaped parts, without a template engine.

``Markup`` is text that is already HTML; everything else that goes into an element, as a child or an
attribute value, is escaped on the way in (``html.escape`` with quotes, values always in double
quotes). Element and attribute names come only from our code and must look like names, so no input
can open a tag or an attribute. Keyword arguments name attributes: a trailing ``_`` is dropped
(``class_``) and ``_`` becomes ``-`` (``aria_label``, ``data_figure``); True writes a bare
attribute, False and None leave it out.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]*")
VOID = frozenset({"br", "hr", "img", "input", "link", "meta"})
"""Elements without content or end tag."""

Attribute = str | int | float | bool | None


class Markup(str):
    """Text that is HTML already: made here from escaped parts, never from input."""

    __slots__ = ()


Child = str | int | float | Markup | None | Iterable["Child"]


def escape(value: object) -> Markup:
    """``value`` as HTML text; ``Markup`` stays as it is."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value), quote=True))


def join(*children: Child) -> Markup:
    """The children, escaped where they are not ``Markup``, one after another."""
    return Markup("".join(_flatten(children)))


def el(tag: str, /, *children: Child, **attributes: Attribute) -> Markup:
    """``<tag attributes>children</tag>`` (no end tag for a void element)."""
    if not _NAME.fullmatch(tag):
        raise ValueError(f"not an element name: {tag!r}")
    opening = f"<{tag}{_attributes(attributes)}>"
    if tag in VOID:
        if children:
            raise ValueError(f"<{tag}> takes no content")
        return Markup(opening)
    return Markup(f"{opening}{join(*children)}</{tag}>")


def _attributes(attributes: dict[str, Attribute]) -> str:
    parts = []
    for key, value in attributes.items():
        if value is None or value is False:
            continue
        name = key.removesuffix("_").replace("_", "-")
        if not _NAME.fullmatch(name):
            raise ValueError(f"not an attribute name: {name!r}")
        parts.append(f" {name}" if value is True else f' {name}="{escape(value)}"')
    return "".join(parts)


def _flatten(children: Iterable[Child]) -> Iterable[str]:
    for child in children:
        if child is None:
            continue
        if isinstance(child, str | int | float):
            yield escape(child)
        else:
            yield from _flatten(child)
