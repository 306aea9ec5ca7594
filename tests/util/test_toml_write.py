"""Our TOML writer: what it writes reads back the same; what it cannot write it refuses."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from core.util.errors import ConfigError
from core.util.files.toml_write import dumps


def test_round_trip_of_tables_and_arrays_of_tables() -> None:
    document = {
        "preferences": {"on": True, "n": 3, "x": 0.25, "text": 'quote " and \\ and ünïcode\n'},
        "projects": [{"name": "a", "peers": ["/ip4/1", "/ip4/2"]}, {"name": "b", "peers": []}],
    }
    assert tomllib.loads(dumps(document)) == document


@pytest.mark.parametrize(
    "bad",
    [
        {"t": {"x": float("nan")}},
        {"t": {"x": None}},
        {"t": {"bad key": 1}},
        {"t": {"x": [1, None]}},
        {"t": {"x": [[1]]}},
    ],
)
def test_values_that_would_not_read_back_are_refused(bad: dict) -> None:
    with pytest.raises(ConfigError):
        dumps(bad)


def test_a_manifest_reads_back_the_same() -> None:
    """Numbers in lists and arrays of tables inside a table (``[[data.sources]]``) round-trip."""
    path = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"
    document = tomllib.loads(path.read_text(encoding="utf-8"))
    assert tomllib.loads(dumps(document)) == document
