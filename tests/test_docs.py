"""The documentation stays true: package maps list every module (and no folder holds more than a map
can show at a glance), the docs name only commands, scripts and files that exist, the README stays a
front page, the site's navigation lists every page, and the architecture notes draw the layers that
the import contracts enforce.

The docs are README.md and every page under docs/ (the MkDocs site: mkdocs.yml). Building the site in
strict mode (``packaging/dev.py docs``, also a step of the test command) checks links and anchors;
these tests check what the build cannot, and need no mkdocs.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = sorted(
    init.parent
    for tree in ("core", "app", "benchmarks")
    for init in (ROOT / tree).rglob("__init__.py")
    if "__pycache__" not in init.parts
)
DOCS = ROOT / "docs"
LEFT_OUT = {"hooks", "gpu-check"}
"""Folders mkdocs.yml's ``exclude_docs`` leaves out of the site: the build's hooks, and the GPU
check's records (``docs/benchmarks/gpu-check/``: its Markdown summaries are results, not pages)."""
PAGES = sorted(p for p in DOCS.rglob("*.md") if not LEFT_OUT & set(p.relative_to(DOCS).parts[:-1]))
DOC_FILES = [ROOT / "README.md", *PAGES]
README_MAX_LINES = 250
MAX_MODULES = 20
"""Modules a folder of the code may hold (its ``__init__.py`` not counted): past that, a folder
holds more than one concept, and its map stops being one a reader takes in at a glance."""
REPO_PATH = r"(?:core|app|tests|benchmarks|packaging|resources|docs)/"


def members(package: Path) -> list[str]:
    modules = [p.stem for p in package.glob("*.py") if p.stem != "__init__"]
    subpackages = [p.name for p in package.iterdir() if (p / "__init__.py").is_file()]
    return sorted(modules + subpackages)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_package_map_lists_every_module(package: Path) -> None:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    missing = [m for m in members(package) if not re.search(rf"``{re.escape(m)}/?``", doc)]
    assert not missing, f"{package.relative_to(ROOT)}/__init__.py's map lacks {missing}"


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_folder_holds_more_than_twenty_modules(package: Path) -> None:
    modules = [p.stem for p in package.glob("*.py") if p.stem != "__init__"]
    assert len(modules) <= MAX_MODULES, (
        f"{package.relative_to(ROOT)} holds {len(modules)} modules: give some a room of their own"
    )


# ---- what the docs show ------------------------------------------------------------------------

_FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1\s*$", re.M | re.S)
_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def code_of(text: str) -> tuple[list[str], list[str]]:
    """The fenced code blocks of a Markdown text, and its inline code spans outside them."""
    blocks = [m.group(2) for m in _FENCE.finditer(text)]
    prose = _FENCE.sub("", text)
    spans = [m.group(2).strip() for m in _SPAN.finditer(prose)]
    return blocks, spans


def shown_code(files: list[Path]) -> list[tuple[str, str]]:
    """(file, code) for every block and span in ``files``."""
    found = []
    for path in files:
        blocks, spans = code_of(path.read_text())
        found += [(str(path.relative_to(ROOT)), code) for code in blocks + spans]
    return found


_COMMAND = re.compile(r"(?:^|(?<=[\s;&|(]))(?:[\w./-]*/)?barnraise[ \t]+([^\n#`]*)", re.M)


def barnraise_commands(files: list[Path]) -> dict[tuple[str, ...], list[str]]:
    """Each ``barnraise ...`` command line shown, as its words up to the first option (the
    subcommand path and perhaps its first argument), with where it is shown."""
    found: dict[tuple[str, ...], list[str]] = {}
    for where, code in shown_code(files):
        for match in _COMMAND.finditer(code):
            line = match.group(1).split(" | ")[0]  # a shell pipe, or "pause | resume" alternatives
            words: list[str] = []
            for word in line.split():
                if not re.match(r"['\"]?[a-z0-9]", word):
                    break  # an option, a placeholder (<URL>, NAME, …) or the end of the command
                words.append(word.strip("'\""))
            for alternative in _alternatives(words):
                found.setdefault(tuple(alternative), []).append(where)
    return found


def _alternatives(words: list[str]) -> list[list[str]]:
    """``peer|aux --manifest`` is two commands."""
    if words and "|" in words[0]:
        return [[first, *words[1:]] for first in words[0].split("|") if first]
    return [words]


_CHECK_COMMANDS = """
import argparse, contextlib, io, json, sys
from core.cli.main import build_parser

def subcommands(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return None

def first_choices(parser):
    for action in parser._actions:
        if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
            return action.choices
    return None

root = build_parser()
verdicts, helped = {}, {}
for words in json.load(sys.stdin):
    parser, path, error = root, [], None
    for word in words:
        commands = subcommands(parser)
        if commands is not None:
            if word not in commands:
                error = f"no command {' '.join(['barnraise', *path, word])!r}"
                break
            parser, path = commands[word], [*path, word]
            continue
        choices = first_choices(parser)
        if choices is not None and word not in choices:
            error = f"{' '.join(['barnraise', *path])} has no {word!r} (it takes {', '.join(choices)})"
        break
    key = " ".join(path)
    if error is None and key not in helped:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                root.parse_args([*path, "--help"])
            helped[key] = "--help returned instead of exiting"
        except SystemExit as exit:
            helped[key] = None if exit.code == 0 else out.getvalue().strip()[-300:]
    verdicts[" ".join(words)] = error or helped.get(key)
print(json.dumps({"verdicts": verdicts, "help_runs": len(helped)}))
"""


def test_every_barnraise_command_the_docs_show_exists() -> None:
    """One process asks the real parser: each shown command's subcommands exist (and its first
    argument, where the command takes a fixed set), and ``--help`` works once per command path."""
    commands = barnraise_commands(DOC_FILES)
    assert len(commands) > 20, "the docs show the barnraise commands"
    done = subprocess.run(
        [sys.executable, "-c", _CHECK_COMMANDS],
        input=json.dumps([list(words) for words in commands]),
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=120,
    )
    verdicts = json.loads(done.stdout)["verdicts"]
    wrong = {
        f"barnraise {' '.join(words)} ({', '.join(sorted(set(where)))})": verdicts[" ".join(words)]
        for words, where in commands.items()
        if verdicts[" ".join(words)]
    }
    assert not wrong, f"the docs show commands that do not exist: {wrong}"


def dev_verbs() -> set[str]:
    """``VERBS`` in packaging/dev.py, read without importing it."""
    tree = ast.parse((ROOT / "packaging" / "dev.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "VERBS" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    raise AssertionError("packaging/dev.py defines VERBS")


def test_every_dev_py_verb_and_script_the_docs_name_exists() -> None:
    verbs = dev_verbs()
    wrong = []
    for path in DOC_FILES:
        text = path.read_text()
        where = path.relative_to(ROOT)
        wrong += [
            f"{where}: dev.py {verb}"
            for verb in re.findall(r"packaging/dev\.py[ \t]+([a-z][\w-]*)", text)
            if verb not in verbs
        ]
        wrong += [
            f"{where}: {script}"
            for script in re.findall(r"(?<![\w/.-])((?:benchmarks|packaging)/[\w/-]+\.py)\b", text)
            if not (ROOT / script).is_file()
        ]
        wrong += [  # python -m benchmarks.<room>.<name>, perhaps broken over two lines
            f"{where}: -m {module}"
            for module in re.findall(r"-m\s+(benchmarks(?:\.\w+)+)", text)
            if not (ROOT / Path(*module.split("."))).with_suffix(".py").is_file()
        ]
    assert not wrong, f"the docs name scripts or dev.py verbs that do not exist: {wrong}"


# ---- the files the docs name -------------------------------------------------------------------


def named_paths(files: list[Path]) -> dict[str, list[str]]:
    """Repository paths the docs name: whole code spans that are a path (``core/net/``, ``tests/x.py``,
    ``tests/a.py::test_b``), and paths inside code blocks."""
    found: dict[str, list[str]] = {}
    for where, code in shown_code(files):
        if "\n" not in code and re.fullmatch(rf"{REPO_PATH}[^\s<>*…]+", code):
            names = [code]
        else:
            names = re.findall(rf"(?<![\w./~$<-])({REPO_PATH}[\w./-]*[\w/])", code)
        for name in names:
            found.setdefault(name.split("::")[0].split(":")[0], []).append(where)
    return found


def readme_links() -> list[str]:
    """The README's links and images to files of the repository (the site's build checks its own
    pages' links; GitHub shows the README, which no build checks)."""
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    return [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:|#", t)]


def named_modules(files: list[Path]) -> dict[str, list[str]]:
    """Dotted names of the engine's modules in code spans (``core.util.process.launch``,
    ``core.api.program.VERSION``)."""
    found: dict[str, list[str]] = {}
    for where, code in shown_code(files):
        if "\n" in code:
            continue
        match = re.match(r"(core(?:\.\w+)+)", code)
        if match:
            found.setdefault(match.group(1), []).append(where)
    return found


def path_problem(name: str) -> str | None:
    """Why a path named in the docs is wrong, or None."""
    return None if (ROOT / name.rstrip("/")).exists() else "does not exist"


def module_problem(dotted: str) -> str | None:
    """Why a dotted module name is wrong: the longest prefix that is a module must leave at most one
    name, which that module's source mentions."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        base = "/".join(parts[:end])
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            problem = path_problem(candidate)
            if problem is not None:
                continue
            rest = parts[end:]
            if not rest:
                return None
            source = ROOT / candidate
            if len(rest) == 1 and (not source.exists() or rest[0] in source.read_text()):
                return None
            return f"{candidate} has no {'.'.join(rest)}"
    return "no such module"


def test_the_docs_name_only_files_that_exist() -> None:
    found = named_paths(DOC_FILES)
    assert len(found) > 50, "the docs name the code they describe"
    wrong = {
        f"{name} ({', '.join(sorted(set(where)))})": problem
        for name, where in found.items()
        if (problem := path_problem(name))
    }
    assert not wrong, f"the docs name paths that are wrong: {wrong}"


def test_the_readme_links_only_to_files_that_exist() -> None:
    links = readme_links()
    assert links, "the README links into docs/"
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"the README links to files that do not exist: {missing}"


def test_the_docs_name_only_modules_that_exist() -> None:
    found = named_modules(DOC_FILES)
    wrong = {
        f"{name} ({', '.join(sorted(set(where)))})": problem
        for name, where in found.items()
        if (problem := module_problem(name))
    }
    assert not wrong, f"the docs name modules that are wrong: {wrong}"


# ---- shape -------------------------------------------------------------------------------------


def test_no_issue_numbers_in_the_docs() -> None:
    """History (which issue asked for what) belongs in git, not in the docs."""
    texts = [*DOC_FILES, *(DOCS / "hooks").glob("*.py"), ROOT / "mkdocs.yml"]
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)!r}"
        for path in texts
        for match in re.finditer(r"\bissues?\s*(?:#\s*)?\d+", path.read_text(), re.I)
    ]
    assert not found, f"issue numbers in the docs: {found}"


def test_the_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; the front page keeps to {README_MAX_LINES} and the rest "
        "goes to docs/"
    )


def nav_pages() -> list[str]:
    """The pages mkdocs.yml's ``nav`` lists, read without YAML (the tests need no mkdocs)."""
    text = (ROOT / "mkdocs.yml").read_text()
    nav = re.search(r"^nav:\n((?:[ \t]+.*\n?|\n)*)", text, re.M)
    assert nav, "mkdocs.yml has a nav"
    return re.findall(r"^\s*-\s*(?:[^\n]*?:\s+)?([\w./-]+\.md)\s*$", nav.group(1), re.M)


def test_the_site_navigation_lists_every_page() -> None:
    listed = nav_pages()
    pages = [str(p.relative_to(DOCS)) for p in PAGES]
    assert sorted(set(pages) - set(listed)) == [], "pages under docs/ missing from mkdocs.yml's nav"
    assert sorted(set(listed) - set(pages)) == [], "mkdocs.yml's nav lists pages that do not exist"
    assert len(listed) == len(set(listed)), "a page is listed twice"


def test_the_architecture_notes_draw_the_enforced_layers() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [
        c["layers"]
        for c in contracts["contracts"]
        if c["type"] == "layers" and "containers" not in c
    ]
    enforced = [
        " | ".join(sorted(part.strip().removeprefix("core.") for part in layer.split("|")))
        for layer in layers
    ]
    notes = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"```text layers\n(.*?)```", notes, re.S)
    assert block, "docs/architecture.md draws the layers in a ```text layers block"
    drawn = [
        " | ".join(sorted(p.strip() for p in line.split("#")[0].strip().split("|")))
        for line in block.group(1).splitlines()
        if line.split("#")[0].strip()
    ]
    assert drawn == enforced
