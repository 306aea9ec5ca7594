"""How deeply lists and dictionaries nest, measured without recursion.

Parsed documents from outside (a JSON body, a TOML manifest) may nest thousands of levels deep;
code that walks them recursively (``repr``, validation, encoding) then dies of a ``RecursionError``.
Readers refuse such documents first with ``deeper_than``, which walks with its own stack and stops
as soon as the limit is passed, so it costs little even on a huge document.
"""

from __future__ import annotations


def deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` holds lists, tuples or dicts nested more than ``limit`` levels deep
    (a scalar is depth 0, ``[1]`` and ``{"a": 1}`` depth 1)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] | tuple[object, ...] = list(item.values())
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend(
            (child, depth + 1) for child in children if isinstance(child, dict | list | tuple)
        )
    return False
