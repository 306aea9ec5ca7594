"""Making new projects fast in tests: a quick scrypt, answers without questions, the demo's data
made once per session (``tests/conftest.py``'s ``demo_data``) as the cache it is copied from."""

from __future__ import annotations

from pathlib import Path

from core.coordinator import ScryptParams
from core.organize.answers import Answers, Given, settle
from core.organize.new import NewProject, create_project

FAST_SCRYPT = ScryptParams(n=2**10)
PASSWORD = "correct horse battery"
PUBLIC_URL = "http://127.0.0.1:18470"
DATA = ("https://data.example.org/a.jsonl.gz", "https://data.example.org/b.jsonl.gz")


def answers(name: str = "test-proj", **given: object) -> Answers:
    """The answers of a project made without questions; ``given`` as the flags would give them."""
    defaults: dict[str, object] = {"public_url": PUBLIC_URL, "organizer": "Ada", "data": DATA}
    if given.get("kind") == "dmoe":
        del defaults["data"]
    return settle(Given(name=name, **{**defaults, **given}), None)  # type: ignore[arg-type]


def make_project(
    folder: Path,
    settled: Answers | None = None,
    *,
    password: str = PASSWORD,
    demo_cache: Path | None = None,
) -> NewProject:
    return create_project(
        settled or answers(),
        password,
        folder,
        demo_cache=demo_cache or folder.parent / "no-demo-cache",
        params=FAST_SCRYPT,
    )
