"""MkDocs hook: reference tables generated at build time from the code's own definitions.

A page asks for one with a marker alone on a line:

    <!-- reference: manifest collaborative -->   the sections of a collaborative project's manifest
    <!-- reference: manifest dmoe -->            the sections of a mixture-of-experts manifest
    <!-- reference: preferences -->              the engine's scheduling preferences

The manifest's sections are frozen dataclasses (``core/project/sections.py``,
``core/project/dmoe_sections.py``): their annotations are the types, their defaults what an omitted
key means, the string under each field its documentation, and the checks in ``__post_init__`` the
allowed values. The preferences are a dataclass too (``core/policy/preferences.py``), each field's
help in its metadata. Everything here is read from those classes, so the pages cannot drift from
what the code accepts. An unknown marker fails the build, and so does a reference no page asked for.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import itertools
import operator
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the checkout's code, also when mkdocs runs outside the set-up
    sys.path.insert(0, str(ROOT))

MARKER = re.compile(r"^<!-- reference: ([a-z ]+?) -->$", re.M)
MANIFESTS = {
    "collaborative": ("core.project.manifest", "Manifest"),
    "dmoe": ("core.project.dmoe", "DmoeManifest"),
}
_rendered: set[str] = set()


def on_pre_build(config: MkDocsConfig) -> None:
    _rendered.clear()


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    def render(match: re.Match[str]) -> str:
        what = match.group(1)
        _rendered.add(what)
        kind, _, variant = what.partition(" ")
        if kind == "manifest" and variant in MANIFESTS:
            return manifest_reference(*MANIFESTS[variant])
        if what == "preferences":
            return preferences_reference()
        raise PluginError(f"{page.file.src_uri}: no reference named {what!r}")

    return MARKER.sub(render, markdown)


def on_post_build(config: MkDocsConfig) -> None:
    wanted = {f"manifest {name}" for name in MANIFESTS} | {"preferences"}
    if missing := sorted(wanted - _rendered):
        raise PluginError(f"no page shows the generated reference of: {', '.join(missing)}")


# ---- the manifest ------------------------------------------------------------------------------


def manifest_reference(module_name: str, class_name: str) -> str:
    """One heading and table per section, in the order the manifest declares them."""
    manifest = getattr(importlib.import_module(module_name), class_name)
    out: list[str] = []
    for field in dataclasses.fields(manifest):
        hint = typing.get_type_hints(manifest)[field.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint) and hasattr(hint, "KEY"):
            out.extend(_section(hint, f"[{_key(hint)}]"))
            for nested in _nested_sections(hint):
                out.extend(_section(nested, f"[[{_key(nested)}]]"))
    return "\n".join(out)


def _key(section: type) -> str:
    """The section's dotted TOML key (its ``KEY`` class variable)."""
    return str(vars(section)["KEY"])


def _nested_sections(section: type) -> Iterator[type]:
    """Arrays of tables inside a section (``[[data.sources]]``)."""
    for hint in typing.get_type_hints(section).values():
        args = typing.get_args(hint)
        if typing.get_origin(hint) is tuple and args and dataclasses.is_dataclass(args[0]):
            yield typing.cast(type, args[0])


def _section(section: type, heading: str) -> list[str]:
    docs = _field_docs(section)
    allowed = _allowed_values(section)
    hints = typing.get_type_hints(section)
    lines = [f"### `{heading}`", ""]
    if section.__doc__ and not section.__doc__.startswith(section.__name__ + "("):
        lines += [_markdown(inspect.cleandoc(section.__doc__)), ""]
    lines += ["| key | type | default | allowed | what it means |", "|---|---|---|---|---|"]
    for field in dataclasses.fields(section):
        cells = (
            f"`{field.name}`",
            _type_name(hints[field.name]),
            _default(field),
            "; ".join(allowed.get(field.name, [])),
            docs.get(field.name, ""),
        )
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return [*lines, ""]


def _class_node(cls: type) -> ast.ClassDef:
    source = Path(inspect.getfile(cls)).read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return node
    raise PluginError(f"cannot find class {cls.__name__} in {inspect.getfile(cls)}")


def _field_docs(cls: type) -> dict[str, str]:
    """The string literal under each field (an attribute docstring, which Python does not keep)."""
    body = _class_node(cls).body
    docs: dict[str, str] = {}
    for statement, following in itertools.pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = _markdown(inspect.cleandoc(following.value.value))
    return docs


def _allowed_values(cls: type) -> dict[str, list[str]]:
    """What the section's ``__post_init__`` checks field by field, in words."""
    namespace = vars(sys.modules[cls.__module__])
    found: dict[str, list[str]] = {}
    post_init = next(
        (
            n
            for n in _class_node(cls).body
            if isinstance(n, ast.FunctionDef) and n.name == "__post_init__"
        ),
        None,
    )
    if post_init is None:
        return found
    hints = typing.get_type_hints(cls)
    for call, names in _check_calls(post_init):
        evaluate = _evaluator(namespace, names)
        method = typing.cast(ast.Attribute, call.func).attr
        try:
            field = evaluate(call.args[0])
        except _NotConstant:
            continue  # a key built at run time (``urls[3]``): its rule is in the docstring
        if not isinstance(field, str):
            continue
        rule = _rule(method, call, evaluate, hints.get(field))
        if rule:
            found.setdefault(field, []).append(rule)
    return found


def _check_calls(function: ast.FunctionDef) -> Iterator[tuple[ast.Call, dict[str, object]]]:
    """Calls ``check.<rule>(...)``, each with the loop variables it runs under (``for name, most in
    (("vocab_size", MAX_VOCAB), ...)``), once per iteration."""

    def walk(
        nodes: list[ast.stmt], names: dict[str, object]
    ) -> Iterator[tuple[ast.Call, dict[str, object]]]:
        for node in nodes:
            if isinstance(node, ast.For) and isinstance(node.target, ast.Tuple):
                rows = node.iter.elts if isinstance(node.iter, ast.Tuple) else []
                targets = [t.id for t in node.target.elts if isinstance(t, ast.Name)]
                for row in rows:
                    if isinstance(row, ast.Tuple) and len(row.elts) == len(targets):
                        yield from walk(
                            node.body, {**names, **dict(zip(targets, row.elts, strict=True))}
                        )
                continue
            for child in ast.walk(node):
                if (
                    isinstance(child, ast.Call)
                    and isinstance(child.func, ast.Attribute)
                    and isinstance(child.func.value, ast.Name)
                    and child.func.value.id == "check"
                    and child.args
                ):
                    yield child, names

    yield from walk(function.body, {})


class _NotConstant(Exception):
    """An expression that is not built from literals and module constants."""


_OPERATORS: dict[type[ast.AST], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


def _evaluator(namespace: dict[str, Any], names: dict[str, object]) -> Callable[[ast.expr], Any]:
    def evaluate(node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name) and node.id in names:
            bound = names[node.id]
            return evaluate(bound) if isinstance(bound, ast.expr) else bound
        if isinstance(node, ast.Name) and node.id in namespace:
            value = namespace[node.id]
            if isinstance(value, int | float | str | tuple):
                return value
        if isinstance(node, ast.Tuple):
            return tuple(evaluate(e) for e in node.elts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -evaluate(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
        raise _NotConstant(ast.unparse(node))

    return evaluate


def _rule(
    method: str, call: ast.Call, evaluate: Callable[[ast.expr], Any], hint: object
) -> str | None:
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    rule = None
    try:
        if method == "one_of":
            rule = "one of " + ", ".join(f"`{_toml(c)}`" for c in evaluate(call.args[1]))
        elif method == "in_range":
            low = evaluate(call.args[1]) if len(call.args) > 1 else None
            high = evaluate(call.args[2]) if len(call.args) > 2 else None
            low_open = bool(evaluate(keywords["low_open"])) if "low_open" in keywords else False
            high_open = bool(evaluate(keywords["high_open"])) if "high_open" in keywords else False
            rule = _range(low, high, low_open, high_open)
        elif method == "at_most":
            unit = "characters" if hint is str else "entries"
            rule = f"at most {_number(evaluate(call.args[1]))} {unit}"
        elif method == "matches":
            rule = str(evaluate(call.args[2]))
        elif method == "not_empty":
            rule = "not empty"
    except _NotConstant:
        return None  # a bound computed at run time: the docstring says it
    return rule


def _range(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        return f"{left}{_number(low)}, {_number(high)}{right}"
    if low is not None:
        return f"{'above' if low_open else 'at least'} {_number(low)}"
    if high is not None:
        return f"{'below' if high_open else 'at most'} {_number(high)}"
    return ""


def _number(value: float) -> str:
    """Large powers of two and ten as such: 2^20 reads better than 1048576."""
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1e6:
        value = int(value)
    if isinstance(value, int) and value >= 2**16:
        for base in (2, 10):
            exponent = 1
            while base**exponent < value:
                exponent += 1
            if base**exponent == value:
                return f"{base}^{exponent}"
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _type_name(hint: object) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if isinstance(hint, type) and hint in names:
        return names[hint]
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            if dataclasses.is_dataclass(args[0]):
                return "array of tables"
            return f"array of {_type_name(args[0])}s"
        return f"array of {len(args)} {_type_name(args[0])}s"
    if isinstance(hint, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    return getattr(hint, "__name__", str(hint))


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        return f"`{_toml(field.default)}`"
    if field.default_factory is not dataclasses.MISSING:
        return f"`{_toml(field.default_factory())}`"
    return "required"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


# ---- the preferences ---------------------------------------------------------------------------


def preferences_reference() -> str:
    from core.policy.preferences import Preferences  # noqa: PLC0415 - only when a page asks

    hints = typing.get_type_hints(Preferences)
    lines = ["| setting | type | default | what it does |", "|---|---|---|---|"]
    for field in dataclasses.fields(Preferences):
        cells = (
            f"`{field.name}`",
            _type_name(hints[field.name]),
            _default(field),
            _markdown(str(field.metadata.get("help", ""))),
        )
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


# ---- text --------------------------------------------------------------------------------------

_CODE = re.compile(r"(``?)(.+?)\1")


def _markdown(text: str) -> str:
    """reStructuredText-style docstrings as Markdown: ``code`` becomes `code`, and a ``*`` outside
    code (``2**20``) is a character, not emphasis."""
    parts: list[str] = []
    position = 0
    for match in _CODE.finditer(text):
        parts.append(text[position : match.start()].replace("*", r"\*"))
        parts.append(f"`{match.group(2)}`")
        position = match.end()
    parts.append(text[position:].replace("*", r"\*"))
    return "".join(parts)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", r"\|")
