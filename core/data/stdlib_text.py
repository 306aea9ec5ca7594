"""Real English with no download: the prose of Python's own documentation, which every computer
that runs Barnraise already has.

Two sources, both written by people and under the PSF licence, both installed with every Python:
the docstrings of the standard library's modules, classes and functions (read from their source
with ``ast``, nothing is imported), and the reference manual's topics that ``help()`` shows
(``pydoc_data.topics``). About 1.5 MB of prose on Python 3.11: small, but real sentences about
many subjects, where the generated demo corpus (``corpus``) is a grammar of a few hundred words.

What is kept is prose: paragraphs of at least ``MIN_CHARS`` characters, nearly all of them letters,
spaces and punctuation, without interactive examples (``>>>``), with whitespace folded. Test
suites, IDLE, ``site-packages`` and the demos are left out. Repeated paragraphs are kept once.

**A larger corpus.** With ``packages`` the docstrings of the packages installed beside Barnraise
(PyTorch, transformers, NumPy, SciPy...) join in, read the same way: about 20 MB of prose (5.4
million demo tokens, 17 times the standard library's), so that a benchmark can train a small model
well past the unigram floor while reading its text once or twice rather than dozens of times.
Which packages are installed decides the text, so the corpus is the same wherever the same pinned
versions are installed, and whole packages are held out as whole modules are.

**Held out.** Whole modules (and whole topics) go to the held-out part, chosen by a hash of their
name: one in ``HELD_OUT_EVERY``. No sentence of a held-out module is trained on, and a module is on
the same side on every Python version that has it.

**Deterministic.** Files are read in sorted order; paragraphs are shuffled with a seeded generator
and dealt into ``shards`` training shards and one held-out shard (``held-out/``), byte-identical
for the same Python and arguments. ``corpus.json`` records the Python version, the counts and the
files; a second call with the same arguments returns at once.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import random
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from core.data.errors import DataError
from core.data.shard_files import MANIFEST, jsonl_gz, matches, read_manifest, write_atomically

MIN_CHARS = 80
"""Shorter paragraphs are mostly signatures, headings and one-line summaries."""
PROSE_SHARE = 0.9
"""The least share of letters, spaces and common punctuation in a kept paragraph: code, tables
and escape sequences fall below it."""
HELD_OUT_EVERY = 20
"""One module (or topic) in this many is held out: about 5 % of the text."""
HELD_OUT = "held-out"
"""The folder of the held-out shard, inside the corpus folder."""
_SKIPPED = frozenset({"test", "tests", "idlelib", "site-packages", "dist-packages", "Tools"})
_PUNCTUATION = frozenset(" .,;:'\"()-!?")
_SKIPPED_PACKAGE_PARTS = _SKIPPED | {"testing", "_vendor", "vendor", "vendored"}
"""Test suites and copies of other projects' code (pip's vendored packages, say)."""
_VERSION = 1
"""Bump when what is kept changes, so that old corpora are written again."""


def prose(docstring: str) -> Iterator[str]:
    """The paragraphs of ``docstring`` (blank-line separated) that read as prose, folded."""
    for block in docstring.split("\n\n"):
        if ">>>" in block or "..." in block.lstrip()[:3]:
            continue
        text = " ".join(block.split())
        if len(text) < MIN_CHARS:
            continue
        plain = sum(c.isalpha() or c in _PUNCTUATION for c in text)
        if plain >= PROSE_SHARE * len(text):
            yield text


def held_out(name: str) -> bool:
    """Whether the module or topic ``name`` belongs to the held-out part."""
    digest = hashlib.sha256(f"barnraise-held-out/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % HELD_OUT_EVERY == 0


def stdlib_sources(stdlib: Path | None = None) -> Iterator[tuple[str, str]]:
    """(name, docstring) of every module, class and function of the standard library at
    ``stdlib`` (this Python's by default), then (topic, text) of the reference topics; names are
    dotted module names (``json.decoder``) or ``topic:<name>``."""
    root = Path(stdlib or sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise DataError(f"the standard library is not at {root}")
    yield from _docstrings(root)
    yield from _topics()


def package_sources(purelib: Path | None = None) -> Iterator[tuple[str, str]]:
    """(name, docstring) of every module, class and function of the packages installed at
    ``purelib`` (this environment's ``site-packages`` by default): about 15 times the standard
    library's prose where PyTorch, transformers and NumPy are installed. Names start with the
    top-level package, so that a package is held out whole."""
    root = Path(purelib or sysconfig.get_paths()["purelib"])
    if not root.is_dir():
        raise DataError(f"no installed packages at {root}")
    yield from _docstrings(root, skip=_SKIPPED_PACKAGE_PARTS)


def _docstrings(root: Path, skip: frozenset[str] = _SKIPPED) -> Iterator[tuple[str, str]]:
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if skip.intersection(relative.parts) or relative.parts[0].startswith("__"):
            continue
        module = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, OSError):
            continue  # a file of another Python version, or unreadable: not needed
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                docstring = ast.get_docstring(node)
                if docstring:
                    yield module, docstring


def _topics() -> Iterator[tuple[str, str]]:
    try:
        from pydoc_data.topics import topics  # noqa: PLC0415 - half a megabyte, read only here
    except ImportError:  # some distributions leave the help topics out
        return
    for name in sorted(topics):
        yield f"topic:{name}", topics[name]


def write_stdlib_corpus(
    directory: Path,
    *,
    shards: int = 8,
    seed: int = 0,
    stdlib: Path | None = None,
    packages: bool = False,
    purelib: Path | None = None,
) -> tuple[list[Path], Path]:
    """Write (or find already written) the training shards ``shard-00000.jsonl.gz``... and the
    held-out shard ``held-out/shard-00000.jsonl.gz`` in ``directory``; returns their paths.
    ``packages``: the installed packages' docstrings too (``package_sources``), for runs that
    must not repeat the text; reading them takes a few minutes."""
    if shards < 1:
        raise DataError(f"a corpus needs at least one shard, got {shards}")
    directory = Path(directory)
    wanted: dict[str, object] = {
        "source": "python-docs+packages" if packages else "python-docs",
        "version": _VERSION,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "seed": seed,
        "shards": shards,
    }
    names = [f"shard-{index:05d}.jsonl.gz" for index in range(shards)]
    held_name = f"{HELD_OUT}/shard-00000.jsonl.gz"
    paths = [directory / name for name in names]
    previous = read_manifest(directory / MANIFEST)
    if previous is not None and matches(previous, wanted, [*names, held_name], directory):
        return paths, directory / held_name

    train: dict[str, None] = {}
    kept_out: dict[str, None] = {}
    sources = stdlib_sources(stdlib)
    if packages:
        sources = itertools.chain(sources, package_sources(purelib))
    for name, text in sources:
        side = kept_out if held_out(name.split(".")[0]) else train
        for paragraph in prose(text):
            side.setdefault(paragraph)
    for paragraph in kept_out:
        train.pop(paragraph, None)  # a sentence said twice stays on the held-out side only
    if not train or not kept_out:
        raise DataError("the standard library gave no prose to train on or to hold out")
    rng = random.Random(f"barnraise-python-docs/{seed}")
    ordered = list(train)
    rng.shuffle(ordered)

    (directory / HELD_OUT).mkdir(parents=True, exist_ok=True)
    files = []
    for index, name in enumerate(names):
        data, lines = jsonl_gz(ordered[index::shards])
        write_atomically(directory / name, data)
        files.append({"name": name, "bytes": len(data), "examples": lines})
    data, lines = jsonl_gz(kept_out)
    write_atomically(directory / held_name, data)
    files.append({"name": held_name, "bytes": len(data), "examples": lines})
    manifest = json.dumps({**wanted, "files": files}, indent=2) + "\n"
    write_atomically(directory / MANIFEST, manifest.encode())  # last: marks the corpus complete
    return paths, directory / held_name
