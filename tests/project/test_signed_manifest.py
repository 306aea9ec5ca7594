"""The signed manifest's envelope: what a coordinator signs, what an engine accepts, and every way
an answer is refused in plain words (altered, another key, another format, oversized, malformed)."""

from __future__ import annotations

import base64
import json

import pytest

from core.net import Identity
from core.project.signed import (
    FORMAT,
    MAX_ENVELOPE_BYTES,
    SignedManifestError,
    parse_envelope,
    sign_manifest,
    signing_payload,
)
from core.trust.passes import issue_pass
from tests.support.signed_project import PROJECT, project_text

KEY = Identity.from_seed(bytes(range(32)))
OTHER = Identity.from_seed(bytes(range(1, 33)))


def envelope(
    text: str | None = None, *, key: Identity = KEY, version: int = 1
) -> dict[str, object]:
    signed = sign_manifest(key, PROJECT, text or project_text(key), version=version, issued=1e9)
    raw: dict[str, object] = json.loads(signed.to_bytes())
    return raw


def read(document: dict[str, object]) -> object:
    return parse_envelope(json.dumps(document).encode()).check(KEY.peer_id)


def test_a_signed_manifest_round_trips_and_says_who_signed_it() -> None:
    raw = envelope("# ü: non-ASCII survives\n" + project_text(KEY), version=7)
    assert raw["format"] == FORMAT
    assert (raw["project"], raw["version"], raw["issued"]) == (PROJECT, 7, 1_000_000_000)
    signed = parse_envelope(json.dumps(raw).encode())
    assert signed.project_key == KEY.peer_id
    assert signed.verified()
    manifest = signed.check(KEY.peer_id, source="https://coord.example.org")
    assert manifest.project.name == PROJECT
    assert signed.check() == manifest  # without a pinned key: first use trusts the signer


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"manifest": project_text(KEY).replace("lr = 0.01", "lr = 0.02")}, "does not match"),
        ({"version": 8}, "does not match"),
        ({"issued": 1_000_000_001}, "does not match"),
        ({"project_key": str(OTHER.peer_id)}, f"signed by project key {OTHER.peer_id}"),
    ],
    ids=["text", "version", "time", "key"],
)
def test_an_altered_envelope_is_refused(change: dict[str, object], words: str) -> None:
    with pytest.raises(SignedManifestError, match=words):
        read(envelope() | change)


def test_a_manifest_signed_by_another_key_is_refused_even_if_its_signature_is_good() -> None:
    theirs = envelope(project_text(None), key=OTHER)
    assert parse_envelope(json.dumps(theirs).encode()).verified()
    with pytest.raises(SignedManifestError, match=f"not by {KEY.peer_id}, the key you trusted"):
        read(theirs)


def test_a_manifest_naming_another_key_than_its_signer_is_refused() -> None:
    raw = envelope(project_text(OTHER))
    with pytest.raises(SignedManifestError, match=f"names project key {OTHER.peer_id}"):
        read(raw)


def test_other_signatures_of_the_project_key_never_pass_for_a_manifest() -> None:
    """The domain prefix: a pass signed by the project key is no manifest signature."""
    access_pass = issue_pass(KEY, PROJECT, "alice", OTHER.peer_id, issued=1e9, lifetime=60)
    raw = envelope() | {"signature": base64.b64encode(access_pass.signature).decode()}
    with pytest.raises(SignedManifestError, match="does not match"):
        read(raw)
    payload = signing_payload(PROJECT, KEY.peer_id, 1, 1, "x")
    assert payload.startswith(b"barnraise/signed-manifest/v1\x00")


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"<html>captive portal</html>", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not an object"),
        (b'{"format": "something/1"}', "is not a signed manifest"),
        (b'{"format": "barnraise-signed-manifest/9"}', "update Barnraise"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
        (b'{"format": "' + FORMAT.encode() + b'", "version": 1' + b"0" * 5000 + b"}", "not JSON"),
    ],
    ids=["html", "bytes", "list", "format", "newer", "deep", "huge-int"],
)
def test_answers_that_are_not_envelopes_are_refused_in_words(raw: bytes, words: str) -> None:
    with pytest.raises(SignedManifestError, match=words):
        parse_envelope(raw)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"project": "Not A Name"}, "project is not a project name"),
        ({"project": 3}, "project must be a non-empty string"),
        ({"project_key": "12D3KooWnotakey"}, "project_key is not a PeerID"),
        ({"version": 0}, "version must be at least 1"),
        ({"version": True}, "version must be a whole number"),
        ({"version": "3"}, "version must be a whole number"),
        ({"issued": -1}, "issued must be at least 0"),
        ({"signature": "not base64!"}, "signature is not base64"),
        ({"signature": base64.b64encode(b"short").decode()}, "not an Ed25519 signature"),
        ({"manifest": ""}, "manifest must be a non-empty string"),
    ],
)
def test_each_field_is_checked(change: dict[str, object], words: str) -> None:
    with pytest.raises(SignedManifestError, match=words):
        parse_envelope(json.dumps(envelope() | change).encode())


def test_an_invalid_manifest_inside_a_good_signature_is_refused() -> None:
    bad = project_text(KEY).replace("hidden_size = 128", "hidden_size = 130")
    with pytest.raises(SignedManifestError, match=r"signed but not valid: model\.hidden_size"):
        read(envelope(bad))
    other = project_text(KEY, name="other-project")
    raw = envelope(other)  # signed as PROJECT's, but the text is another project's
    with pytest.raises(SignedManifestError, match="of project 'other-project'"):
        read(raw)


def test_oversized_answers_are_refused_before_parsing() -> None:
    with pytest.raises(SignedManifestError, match="too large"):
        parse_envelope(b" " * (MAX_ENVELOPE_BYTES + 1))
    with pytest.raises(ValueError, match="at most"):
        sign_manifest(KEY, PROJECT, "#" * (2 * 1024 * 1024), version=1, issued=0)
