"""The commented manifest: every key written with its note, and it reads back as the same manifest."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from core.organize.manifest_text import KEY_NOTES, SECTION_NOTES, manifest_text, toml_value
from core.organize.new import build_manifest
from core.organize.presets import PRESETS
from core.project import Manifest, parse_any_manifest
from core.trust.identity import Identity
from core.util.errors import ConfigError
from tests.organize.conftest import answers

DHT = f"/dns/backbone.example.org/tcp/4003/p2p/{Identity.generate().peer_id}"


@pytest.mark.parametrize(("kind", "preset"), list(PRESETS))
def test_every_preset_reads_back_the_same_with_every_key_noted(kind: str, preset: str) -> None:
    extra = {} if kind == "dmoe" else {"target_batch": 1024}
    settled = answers("round-trip", kind=kind, preset=preset, mode="moderated", **extra)
    key = str(Identity.generate().peer_id)
    manifest = build_manifest(settled, key, DHT)
    text = manifest_text(manifest, ["a header line"])
    assert parse_any_manifest(text) == manifest
    assert text.startswith("# a header line\n")
    assert manifest.access.project_key == key
    assert manifest.network.initial_peers == (DHT,)
    assert manifest.network.coordinator_url == "http://127.0.0.1:18470"
    if isinstance(manifest, Manifest):
        assert manifest.training.target_batch_size == 1024
        assert manifest.data.sources[0].urls == settled.data
    # every key of every section has its note, and every line but long values fits 100 columns
    for field in dataclasses.fields(manifest):
        section = getattr(manifest, field.name)
        if not dataclasses.is_dataclass(section):
            continue
        name = type(section).KEY
        assert name in SECTION_NOTES
        for key_field in dataclasses.fields(section):
            if key_field.name != "sources":
                assert f"{name}.{key_field.name}" in KEY_NOTES, f"{name}.{key_field.name}"
    for line in text.splitlines():
        assert len(line) <= 100 or not line.startswith("#"), line


def test_text_that_toml_escapes_reads_back_as_it_was() -> None:
    description = 'Say "hi" \\ to Ünïcode, tabs\tand DEL \x7f: ✓'
    settled = dataclasses.replace(answers(), description=description)
    manifest = build_manifest(settled, str(Identity.generate().peer_id), DHT)
    assert parse_any_manifest(manifest_text(manifest, [])).project.description == description


@pytest.mark.parametrize(
    "value", [["a", "b"], (0.9, 0.999), 1e-06, 2**40, True, "x" * 300, ["y" * 60] * 3]
)
def test_values_read_back_by_tomllib(value: object) -> None:
    text = f"key = {toml_value(value, 'key')}\n"
    read = tomllib.loads(text)["key"]
    assert read == (list(value) if isinstance(value, tuple) else value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "\ud800", {"a": 1}, None])
def test_what_would_not_read_back_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="where"):
        toml_value(value, "where")
