"""The demo's real text: prose from Python's own documentation, held out by module, written
deterministically."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from core.data.errors import DataError
from core.data.shard_files import MANIFEST
from core.data.stdlib_text import HELD_OUT_EVERY, held_out, prose, write_stdlib_corpus

SENTENCE = "The decoder reads a document and returns the Python object it describes, or raises."


def texts(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line in lines]


@pytest.mark.parametrize(
    ("docstring", "kept"),
    [
        (SENTENCE, [SENTENCE]),
        (
            f"Short summary.\n\n{SENTENCE}\n  Folded   over lines.",
            [f"{SENTENCE} Folded over lines."],
        ),
        ("decode(s) -> object", []),  # a signature: too short
        (
            f">>> json.loads('[1, 2]')\n[1, 2] and a long enough line of example output here {SENTENCE}",
            [],
        ),
        ("| a | b |\n|---|---|\n| 1 | 2 |" * 6, []),  # a table: mostly symbols
        ("\\x00\\x01\\x02\\x03 {0} [1] <2> =3= *4* @5@ #6# $7$ %8% ^9^ &10& ~11~ `12`" * 2, []),
    ],
)
def test_only_paragraphs_of_prose_are_kept(docstring: str, kept: list[str]) -> None:
    assert list(prose(docstring)) == kept


def test_about_one_module_in_twenty_is_held_out_and_always_the_same() -> None:
    names = [f"module{n}" for n in range(4000)]
    share = sum(map(held_out, names)) / len(names)
    assert abs(share - 1 / HELD_OUT_EVERY) < 0.015
    assert [held_out(n) for n in names[:50]] == [held_out(n) for n in names[:50]]


def fake_stdlib(root: Path) -> Path:
    """Forty small modules with a docstring of prose each, a test suite and a package."""
    root.mkdir()
    for n in range(40):
        (root / f"mod{n}.py").write_text(
            f'"""Module {n}. {SENTENCE} It was written for module number {n} alone."""\n'
            f"def f():\n    '''Function of module {n}: {SENTENCE}'''\n"
        )
    (root / "test").mkdir()
    (root / "test" / "test_mod.py").write_text(
        f'"""A test suite is not text to learn. {SENTENCE}"""\n'
    )
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text(f'"""The package itself says this. {SENTENCE}"""\n')
    (root / "broken.py").write_text("def (:\n")
    return root


def test_held_out_text_is_never_trained_on_and_the_files_are_deterministic(tmp_path: Path) -> None:
    stdlib = fake_stdlib(tmp_path / "lib")
    shards, held = write_stdlib_corpus(tmp_path / "a", shards=3, stdlib=stdlib)
    trained = [text for shard in shards for text in texts(shard)]
    held_texts = texts(held)
    assert trained
    assert held_texts
    assert not set(trained) & set(held_texts)
    assert not any("test suite" in text for text in trained + held_texts)
    assert any("package itself" in text for text in trained + held_texts)
    held_modules = {n for n in range(40) if held_out(f"mod{n}")}
    for text in trained:
        assert not any(f"module number {n} alone" in text for n in held_modules)
    # the same arguments write the same bytes; a second call finds them written
    again, held_again = write_stdlib_corpus(tmp_path / "b", shards=3, stdlib=stdlib)
    assert [p.read_bytes() for p in shards] == [p.read_bytes() for p in again]
    assert held.read_bytes() == held_again.read_bytes()
    stamp = shards[0].stat().st_mtime_ns
    write_stdlib_corpus(tmp_path / "a", shards=3, stdlib=stdlib)
    assert shards[0].stat().st_mtime_ns == stamp
    manifest = json.loads((tmp_path / "a" / MANIFEST).read_text())
    assert manifest["source"] == "python-docs"
    assert [f["name"] for f in manifest["files"]][-1] == "held-out/shard-00000.jsonl.gz"


def test_installed_packages_join_held_out_whole(tmp_path: Path) -> None:
    stdlib = fake_stdlib(tmp_path / "lib")
    purelib = tmp_path / "site"
    for n in range(64):
        (purelib / f"pkg{n}").mkdir(parents=True)
        (purelib / f"pkg{n}" / "core.py").write_text(
            f'"""Package number {n} alone explains this. {SENTENCE}"""\n'
        )
    for skipped in ("tests", "_vendor"):
        (purelib / "pkg0" / skipped).mkdir()
        (purelib / "pkg0" / skipped / "x.py").write_text(
            f'"""Copied or testing code, not to learn. {SENTENCE}"""\n'
        )
    shards, held = write_stdlib_corpus(
        tmp_path / "a", shards=3, stdlib=stdlib, packages=True, purelib=purelib
    )
    trained = [text for shard in shards for text in texts(shard)]
    held_texts = texts(held)
    every = " ".join(trained + held_texts)
    assert "Package number 63 alone" in every
    assert "not to learn" not in every
    held_packages = {n for n in range(64) if held_out(f"pkg{n}")}
    assert held_packages  # 64 names: a few are held out
    for n in range(64):
        side = held_texts if n in held_packages else trained
        assert any(f"Package number {n} alone" in text for text in side)
    manifest = json.loads((tmp_path / "a" / MANIFEST).read_text())
    assert manifest["source"] == "python-docs+packages"
    # the smaller corpus in the same folder is written anew, not taken for the larger one
    plain, _ = write_stdlib_corpus(tmp_path / "a", shards=3, stdlib=stdlib)
    assert "Package number" not in " ".join(t for shard in plain for t in texts(shard))
    with pytest.raises(DataError, match="no installed packages at"):
        write_stdlib_corpus(
            tmp_path / "b", stdlib=stdlib, packages=True, purelib=tmp_path / "nowhere"
        )


def test_bad_arguments_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="at least one shard"):
        write_stdlib_corpus(tmp_path / "c", shards=0)
    with pytest.raises(DataError, match="standard library is not at"):
        write_stdlib_corpus(tmp_path / "c", stdlib=tmp_path / "nowhere")


def test_this_pythons_documentation_gives_a_megabyte_of_prose(tmp_path: Path) -> None:
    shards, held = write_stdlib_corpus(tmp_path / "docs", shards=2)
    trained = sum(len(text) for shard in shards for text in texts(shard))
    kept_out = sum(len(text) for text in texts(held))
    assert trained > 1_000_000
    assert 0.02 < kept_out / (trained + kept_out) < 0.15
