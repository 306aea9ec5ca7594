"""``GET /data/<path>``: the project's public data folder, read-only, ranges, and nothing else.

Hostile requests are sent byte for byte (a client library would normalize ``..`` and percent
escapes away before they reach the server): traversal, encoded traversal and slashes, absolute
paths, NUL, backslashes, symlinks out, hidden files, folders, a FIFO (refused without being
opened), ranges past the end or absurdly long.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.cli.main import main
from core.coordinator import CoordinatorService
from core.coordinator.data_files import CACHE_CONTROL, check_data_folder
from core.net import Identity
from core.util.errors import ConfigError
from tests.coordinator.conftest import FAST_SCRYPT, make_manifest, manifest_text
from tests.coordinator.data_support import SECRET, Answer, ask, serving_data

SHARD = bytes(range(256)) * 40  # 10,240 bytes, every offset telling


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "shards").mkdir(parents=True)
    (data / "shards" / "a.jsonl").write_bytes(SHARD)
    (data / "tokenizer.json").write_text("{}")
    (data / "empty.txt").write_bytes(b"")
    (data / ".hidden").write_bytes(SECRET)
    (data / "x.jsonl").write_bytes(b"plain")
    (data / "x.jsonl.gz").write_bytes(b"not the file asked for")
    (tmp_path / "secret.pem").write_bytes(SECRET)
    (data / "out").symlink_to(tmp_path / "secret.pem")
    (data / "outdir").symlink_to(tmp_path)
    (data / "link.jsonl").symlink_to(data / "shards" / "a.jsonl")  # inside: served
    (data / "to-hidden").symlink_to(data / ".hidden")
    if hasattr(os, "mkfifo"):
        os.mkfifo(data / "fifo")
    return data


@pytest.fixture
async def service(tmp_path: Path, folder: Path) -> AsyncIterator[CoordinatorService]:
    async with serving_data(tmp_path, folder) as running:
        yield running


def assert_secured(answer: Answer) -> None:
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in answer.headers["content-security-policy"]
    assert answer.headers["x-frame-options"] == "DENY"


def assert_refused(answer: Answer) -> None:
    assert answer.status == 404, answer
    assert answer.json()["code"] == "not_found"
    assert SECRET not in answer.body


async def test_a_file_whole_by_head_and_by_ranges(service: CoordinatorService) -> None:
    whole = await ask(service.port, "/data/shards/a.jsonl")
    assert (whole.status, whole.body) == (200, SHARD)
    assert whole.headers["accept-ranges"] == "bytes"
    assert whole.headers["cache-control"] == CACHE_CONTROL
    assert_secured(whole)

    head = await ask(service.port, "/data/shards/a.jsonl", method="HEAD")
    assert (head.status, head.body) == (200, b"")
    assert head.headers["content-length"] == str(len(SHARD))

    part = await ask(service.port, "/data/shards/a.jsonl", "Range: bytes=300-303")
    assert (part.status, part.body) == (206, SHARD[300:304])
    assert part.headers["content-range"] == f"bytes 300-303/{len(SHARD)}"
    tail = await ask(service.port, "/data/shards/a.jsonl", "Range: bytes=-5")
    assert (tail.status, tail.body) == (206, SHARD[-5:])
    huge = await ask(service.port, "/data/shards/a.jsonl", f"Range: bytes=10-{10**30}")
    assert (huge.status, huge.body) == (206, SHARD[10:])

    linked = await ask(service.port, "/data/link.jsonl")  # a symlink within the folder
    assert (linked.status, linked.body) == (200, SHARD)
    encoded = await ask(service.port, "/data/shards%2Fa.jsonl")
    assert (encoded.status, encoded.body) == (200, SHARD)


@pytest.mark.parametrize(
    "wanted",
    [
        f"bytes={len(SHARD)}-",  # starts past the end
        f"bytes={10**40}-{10**41}",
        "bytes=" + "9" * 5000 + "-",  # more digits than Python turns into an int
        "bytes=0-1,5-6",  # several ranges: not served
        "bytes=5-1",
        "lines=0-1",
    ],
)
async def test_a_range_that_cannot_be_served_is_a_416_in_json(
    service: CoordinatorService, wanted: str
) -> None:
    answer = await ask(service.port, "/data/shards/a.jsonl", f"Range: {wanted}")
    assert answer.status == 416, answer
    assert answer.json()["code"] == "range_not_satisfiable"
    assert answer.headers["content-range"] == f"bytes */{len(SHARD)}"
    assert_secured(answer)
    empty = await ask(service.port, "/data/empty.txt", "Range: bytes=-1")
    assert empty.status == 416


@pytest.mark.parametrize(
    "target",
    [
        "/data/../db/c.db",
        "/data/%2e%2e/db/c.db",
        "/data/%2E%2E/secret.pem",
        "/data/shards/%2e%2e/%2e%2e/secret.pem",
        "/data/%2e%2e%2fsecret.pem",
        "/data/shards/..%2f..%2fsecret.pem",
        "/data//etc/passwd",
        "/data/%2Fetc%2Fpasswd",
        "/data/..%5c..%5csecret.pem",
        "/data/shards%00/a.jsonl",
        "/data/shards/a.jsonl%00",
        "/data/./shards/a.jsonl",
        "/data/out",
        "/data/outdir/secret.pem",
        "/data/.hidden",
        "/data/to-hidden",
        "/data/shards",
        "/data/shards/",
        "/data/",
        "/data",
        "/data/no-such-file",
        "/data/" + "a/" * 700 + "b",
    ],
)
async def test_hostile_paths_are_refused(service: CoordinatorService, target: str) -> None:
    answer = await ask(service.port, target)
    assert_refused(answer)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
async def test_a_fifo_is_refused_without_being_opened(
    service: CoordinatorService, folder: Path
) -> None:
    answer = await asyncio.wait_for(ask(service.port, "/data/fifo"), timeout=10)
    assert_refused(answer)
    # a writer that does not wait finds no reader: the coordinator never opened it
    with pytest.raises(OSError, match=os.strerror(errno.ENXIO)):
        os.open(folder / "fifo", os.O_WRONLY | os.O_NONBLOCK)


async def test_the_file_asked_for_not_a_compressed_sibling(service: CoordinatorService) -> None:
    answer = await ask(service.port, "/data/x.jsonl", "Accept-Encoding: gzip, br")
    assert (answer.status, answer.body) == (200, b"plain")
    assert "content-encoding" not in answer.headers


async def test_only_reads_are_answered(service: CoordinatorService) -> None:
    for method in ("POST", "PUT", "DELETE"):
        answer = await ask(service.port, "/data/tokenizer.json", "Content-Length: 0", method=method)
        assert answer.status == 405
        assert answer.json()["code"] == "method_not_allowed"
    assert (await ask(service.port, "/data/tokenizer.json")).body == b"{}"


async def test_without_a_data_folder_nothing_is_served(tmp_path: Path) -> None:
    key = Identity.generate()
    service = CoordinatorService(make_manifest(key), tmp_path / "c.db", key, scrypt_n=FAST_SCRYPT.n)
    (tmp_path / "tokenizer.json").write_text("{}")
    await service.start("127.0.0.1", 0)
    try:
        assert (await ask(service.port, "/data/tokenizer.json")).status == 404
    finally:
        await service.close()


def test_a_folder_that_holds_private_files_is_refused(tmp_path: Path) -> None:
    key = Identity.generate()
    with pytest.raises(ConfigError, match="must stay private"):
        CoordinatorService(make_manifest(key), tmp_path / "c.db", key, data_dir=tmp_path)
    with pytest.raises(ConfigError, match="cannot be served"):
        check_data_folder(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is not a folder"):
        check_data_folder(tmp_path / "file")
    (tmp_path / "data").mkdir()
    assert (
        check_data_folder(tmp_path / "data", [tmp_path / "c.db"]) == (tmp_path / "data").resolve()
    )


def test_the_command_refuses_a_data_folder_that_holds_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = Identity.generate()
    key.save(tmp_path / "key.pem")
    manifest = tmp_path / "project.toml"
    manifest.write_text(manifest_text(str(key.peer_id)))
    argv = ["coordinator", "--manifest", str(manifest), "--db", str(tmp_path / "db" / "c.db")]
    code = main([*argv, "--key", str(tmp_path / "key.pem"), "--data", str(tmp_path), "--port", "0"])
    assert code == 1
    assert "holds" in capsys.readouterr().err
    assert not (tmp_path / "db").exists()


@pytest.mark.parametrize("name", ["aux.env", "peer-key.pem", "server.KEY", "other.db", "c.db-wal"])
async def test_files_named_like_secrets_are_never_served(
    service: CoordinatorService, folder: Path, name: str
) -> None:
    # a folder given by mistake (the project's services/, say) must not hand out its password file
    (folder / "services").mkdir(exist_ok=True)
    (folder / "services" / name).write_bytes(SECRET)
    assert_refused(await ask(service.port, f"/data/services/{name}"))
