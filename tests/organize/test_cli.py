"""``barnraise project new`` on the command line: flags, questions on a terminal, the password."""

from __future__ import annotations

import functools
import io
from pathlib import Path

import pytest

from core.cli import project as project_cli
from core.cli.main import main
from core.coordinator import CoordinatorStore, Password
from core.coordinator.people.passwords import verify_password
from core.organize.new import create_project
from core.project import load_any_manifest
from tests.organize.conftest import FAST_SCRYPT, PASSWORD

FLAGS = [
    "--public-url",
    "http://127.0.0.1:18470",
    "--organizer",
    "Ada",
    "--data",
    "https://data.example.org/a.jsonl.gz",
]


class Terminal(io.StringIO):
    """Standard input that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch, barnraise_home: Path) -> None:
    """A fast scrypt, no password in the environment, and a user folder of the test's own."""
    monkeypatch.setattr(
        project_cli, "create_project", functools.partial(create_project, params=FAST_SCRYPT)
    )
    monkeypatch.delenv("BARNRAISE_PASSWORD", raising=False)


def new(tmp_path: Path, *args: str) -> int:
    return main(["project", "new", "proj", "--dir", str(tmp_path / "proj"), *FLAGS, *args])


def password_of(folder: Path, name: str) -> str | None:
    with CoordinatorStore(folder / "coordinator.db") as store:
        user = next(u for u in store.users() if u.name == name)
        return store.accounts.password_hash(user.key)


def test_without_a_terminal_or_password_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert new(tmp_path) == 1
    err = capsys.readouterr().err
    assert "the organizer's account (Ada) needs a password: pass --password-stdin" in err
    assert "BARNRAISE_PASSWORD" in err
    assert not (tmp_path / "proj").exists()


def test_the_password_from_stdin_and_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert new(tmp_path, "--password-stdin", "--mode", "moderated") == 0
    out = capsys.readouterr().out
    folder = tmp_path / "proj"
    manifest = load_any_manifest(folder / "project.toml")
    key = manifest.access.project_key
    assert f"Project proj is ready in {folder}" in out
    assert out.strip().endswith(
        f"The project URL, for volunteers: http://127.0.0.1:18470/#key={key}"
    )
    assert f"barnraise project check {folder / 'project.toml'}" in out
    assert "sudo systemctl enable --now" in out
    assert "shards/" not in out  # the data given, not the demo's
    stored = password_of(folder, "Ada")
    assert stored is not None
    assert verify_password(Password(PASSWORD), stored)


def test_the_password_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    monkeypatch.setenv("BARNRAISE_PASSWORD", PASSWORD)
    assert new(tmp_path, "--non-interactive") == 0
    stored = password_of(tmp_path / "proj", "Ada")
    assert stored is not None
    assert verify_password(Password(PASSWORD), stored)


def test_on_a_terminal_it_asks_what_no_flag_gave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", Terminal())
    replies = iter(["", "", "https://d.example.org/x.parquet", "64", "Grace", "Digits!"])
    prompts: list[str] = []

    def answer(prompt: str) -> str:
        prompts.append(prompt)
        return next(replies)

    typed = iter(
        ["short", "a good long one", "a different one", "a good long one", "a good long one"]
    )
    monkeypatch.setattr("builtins.input", answer)
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(typed))
    folder = tmp_path / "asked"
    assert (
        main(["project", "new", "asked", "--dir", str(folder), "--public-url", "http://h:1"]) == 0
    )
    manifest = load_any_manifest(folder / "project.toml")
    assert manifest.access.mode == "moderated"
    assert manifest.data.sources[0].urls == ("https://d.example.org/x.parquet",)  # type: ignore[union-attr]
    assert manifest.training.target_batch_size == 64  # type: ignore[union-attr]
    assert manifest.project.description == "Digits!"
    assert prompts[0].endswith("[moderated] ")
    assert len(prompts) == 6  # everything but the public URL, which a flag gave
    err = capsys.readouterr().err
    assert "8 to 1024 characters" in err  # "short", then a confirmation that differed
    assert "the two differ" in err
    stored = password_of(folder, "Grace")
    assert stored is not None
    assert verify_password(Password("a good long one"), stored)


def test_a_folder_in_use_is_refused_before_any_question(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "keep.txt").write_text("mine")
    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail(f"asked {prompt}"))
    assert main(["project", "new", "proj", "--dir", str(tmp_path / "proj")]) == 1
    assert "already exists and is not empty" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "proj").iterdir()] == ["keep.txt"]


def test_flags_that_do_not_apply_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert new(tmp_path, "--kind", "dmoe", "--password-stdin") == 1
    assert "--data is for collaborative projects" in capsys.readouterr().err
    assert not (tmp_path / "proj").exists()


def test_the_summary_says_the_coordinator_serves_the_demo_data(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    demo_data: Path,
) -> None:
    def made_from_the_demo_cache(*args: object, **kwargs: object) -> object:
        kwargs["demo_cache"] = demo_data  # made once per test session
        return create_project(*args, params=FAST_SCRYPT, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(project_cli, "create_project", made_from_the_demo_cache)
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    folder = tmp_path / "demo"
    argv = ["project", "new", "demo", "--dir", str(folder), *FLAGS[:4], "--password-stdin"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "project.toml      the manifest (moderated;" in out
    assert "data/             the demo's shards and tokenizer: public, the coordinator" in out
    assert "serves them at http://127.0.0.1:18470/data/" in out
    assert (folder / "data" / "tokenizer.json").is_file()
