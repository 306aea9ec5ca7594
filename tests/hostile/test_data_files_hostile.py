"""Secrets left in the coordinator's public data folder (``GET /data/<path>``), asked for over HTTP
from a real ``CoordinatorService``: names a plain list of suffixes misses (backups, journals, SSH
keys, credentials, an env file with a second extension), and hard links that give a secret an
innocent name. Each is a 404 exactly like a file that is not there, while the public files beside
them are still served.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.coordinator import CoordinatorService
from tests.coordinator.data_support import SECRET, Answer, ask, serving_data

PUBLIC = b"a shard everyone may download"
SECRET_NAMES = [
    "coordinator.db.bak",
    "coordinator.DB.bak",
    "c.db-journal",
    "c.sqlite3-wal",
    "coordinator.db~",
    "id_ed25519",
    "id_rsa",
    "id_rsa.old",
    "id_ecdsa",
    "id_dsa",
    "credentials.json",
    "git-credentials",
    "aux.env.txt",
    "aux.ENV",
    "client_secret.json",
    "passwords.csv",
    "api-token.txt",
    "netrc",
    "pgpass.txt",
    "server.key.orig",
    "cert.PEM.txt",
]
PUBLIC_NAMES = [
    "tokenizer.json",
    "shard-00001.jsonl",
    "train.jsonl.gz",
    "vocab.txt",
    "notes.txt",
    "keywords.json",
    "tokens-000.bin",
    "monkey.jsonl",
]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "shards").mkdir(parents=True)
    for name in PUBLIC_NAMES:
        (data / "shards" / name).write_bytes(PUBLIC)
    return data


@pytest.fixture
async def service(tmp_path: Path, folder: Path) -> AsyncIterator[CoordinatorService]:
    async with serving_data(tmp_path, folder) as running:
        yield running


def assert_like_missing(answer: Answer, missing: Answer) -> None:
    """Refused, and nothing in the answer tells a refused file from one that is not there."""
    assert answer.status == 404, answer
    assert SECRET not in answer.body
    assert answer.json()["code"] == missing.json()["code"] == "not_found"
    assert answer.json()["error"] == missing.json()["error"]
    assert answer.headers.get("content-type") == missing.headers.get("content-type")


async def test_the_public_files_are_served(service: CoordinatorService) -> None:
    for name in PUBLIC_NAMES:
        answer = await ask(service.port, f"/data/shards/{name}")
        assert (answer.status, answer.body) == (200, PUBLIC), name


@pytest.mark.parametrize("name", SECRET_NAMES)
async def test_names_of_secrets_are_refused_like_missing_files(
    service: CoordinatorService, folder: Path, name: str
) -> None:
    (folder / "shards" / name).write_bytes(SECRET)
    missing = await ask(service.port, "/data/shards/no-such-file")
    assert_like_missing(await ask(service.port, f"/data/shards/{name}"), missing)


async def test_a_folder_named_like_a_secret_serves_nothing(
    service: CoordinatorService, folder: Path
) -> None:
    (folder / "secrets").mkdir()
    (folder / "secrets" / "notes.txt").write_bytes(SECRET)
    missing = await ask(service.port, "/data/shards/no-such-file")
    assert_like_missing(await ask(service.port, "/data/secrets/notes.txt"), missing)


@pytest.mark.parametrize("target", ["db/c.db", "key.pem"])
async def test_a_hard_link_to_a_secret_under_an_innocent_name_is_refused(
    service: CoordinatorService, tmp_path: Path, folder: Path, target: str
) -> None:
    secret = tmp_path / target
    if not secret.exists():
        secret.write_bytes(SECRET)
    try:
        os.link(secret, folder / "shards" / "innocent.txt")
    except OSError as exc:  # a file system without hard links has none to refuse
        pytest.skip(f"no hard links here: {exc}")
    missing = await ask(service.port, "/data/shards/no-such-file")
    assert_like_missing(await ask(service.port, "/data/shards/innocent.txt"), missing)
    # the public files beside it are still served
    answer = await ask(service.port, "/data/shards/notes.txt")
    assert (answer.status, answer.body) == (200, PUBLIC)
