"""Published checkpoints: a signed index over HTTP, fetched and verified, every forgery refused."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import torch

from core.data.server import ShardServer
from core.training.checkpoints import CheckpointStore
from core.training.publish.checkpoint import (
    INDEX_NAME,
    CheckpointPublishing,
    PublishedCheckpointError,
    PublishedIndex,
    fetch_published_checkpoint,
    publish_checkpoint,
    sign_index,
)
from core.trust.identity import Identity

PROJECT = "test-project"
KEY = Identity.from_seed(bytes(range(32)))
OTHER_KEY = Identity.from_seed(bytes(range(1, 33)))


def model_state(value: float) -> dict[str, Any]:
    return {"weight": torch.full((4, 3), value), "bias": torch.arange(3, dtype=torch.float32)}


def save(tmp_path: Path, epoch: int, value: float = 0.5) -> Path:
    store = CheckpointStore(tmp_path / "store", keep=10)
    path = store.save(
        epoch, model_state(value), {"state": {}, "param_groups": []}, {"run": "t"}, loss=2.5
    )
    assert path is not None
    return path


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


@pytest.fixture
def public(tmp_path: Path) -> Path:
    folder = tmp_path / "public"
    folder.mkdir()
    return folder


@pytest.fixture
async def server(public: Path) -> AsyncIterator[ShardServer]:
    served = ShardServer(public)
    await served.start()
    try:
        yield served
    finally:
        await served.close()


def publish(tmp_path: Path, public: Path, epoch: int = 30, key: Identity = KEY) -> PublishedIndex:
    return publish_checkpoint(
        save(tmp_path, epoch), public, key, epoch=epoch, loss=2.5, project=PROJECT
    )


async def fetch(url: str, dest: Path, **options: Any) -> Path | None:
    return await fetch_published_checkpoint(
        url, KEY.peer_id, options.pop("project", PROJECT), dest, timeout=10.0, **options
    )


def rewrite_index(public: Path, **changes: Any) -> None:
    document = json.loads((public / INDEX_NAME).read_text())
    document.update(changes)
    (public / INDEX_NAME).write_text(json.dumps(document))


async def test_publish_then_fetch_round_trip(
    tmp_path: Path, public: Path, server: ShardServer
) -> None:
    source = save(tmp_path, 30, value=0.25)
    index = CheckpointPublishing(public, KEY, PROJECT).publish(source, 30, 2.5)

    data = source.read_bytes()
    assert files_in(public) == ["checkpoint-00000030.pt", INDEX_NAME]
    assert (public / "checkpoint-00000030.pt").read_bytes() == data
    document = json.loads((public / INDEX_NAME).read_text())
    assert document == {
        "format": 1,
        "project": PROJECT,
        "epoch": 30,
        "loss": 2.5,
        "file": "checkpoint-00000030.pt",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "published_at": index.published_at,
        "signature": index.signature.hex(),
    }
    assert KEY.peer_id.verify(index.signature, index.payload())

    dest = tmp_path / "dest"
    path = await fetch(server.url, dest)
    assert path == dest / "checkpoint-00000030.pt"
    assert files_in(dest) == ["checkpoint-00000030.pt"]  # no .part left behind
    checkpoint = CheckpointStore.load(path)
    assert checkpoint.epoch == 30
    assert checkpoint.loss == 2.5
    for name, tensor in model_state(0.25).items():
        assert torch.equal(checkpoint.model[name], tensor)


async def test_a_url_without_trailing_slash_and_a_newer_epoch_fetch_again(
    tmp_path: Path, public: Path, server: ShardServer
) -> None:
    publish(tmp_path, public, epoch=30)
    dest = tmp_path / "dest"
    first = await fetch(server.url.rstrip("/"), dest)
    publish(tmp_path, public, epoch=40)
    second = await fetch(server.url.rstrip("/"), dest, newer_than=30)
    assert first == dest / "checkpoint-00000030.pt"
    assert second == dest / "checkpoint-00000040.pt"
    assert second is not None
    assert CheckpointStore.load(second).epoch == 40


async def test_nothing_newer_returns_none_without_downloading(
    tmp_path: Path, public: Path, server: ShardServer
) -> None:
    publish(tmp_path, public, epoch=30)
    dest = tmp_path / "dest"
    assert await fetch(server.url, dest, newer_than=30) is None
    assert await fetch(server.url, dest, newer_than=31) is None
    # only the index went over the wire, twice; the checkpoint itself never did
    assert server.bytes_sent == 2 * (public / INDEX_NAME).stat().st_size
    assert files_in(dest) == []


def test_publishing_keeps_the_named_file_and_the_one_before(tmp_path: Path, public: Path) -> None:
    (public / ".publishing-crashed.tmp").write_bytes(b"half a checkpoint")
    (public / "notes.txt").write_text("the organizer's own file")
    for epoch in (10, 20, 30):
        publish(tmp_path, public, epoch=epoch)
    assert files_in(public) == [
        "checkpoint-00000020.pt",
        "checkpoint-00000030.pt",
        INDEX_NAME,
        "notes.txt",
    ]
    assert json.loads((public / INDEX_NAME).read_text())["file"] == "checkpoint-00000030.pt"


def test_publishing_refuses_what_no_peer_should_start_from(tmp_path: Path, public: Path) -> None:
    source = save(tmp_path, 5)
    with pytest.raises(PublishedCheckpointError, match="its own folder"):
        publish_checkpoint(source, source.parent, KEY, epoch=5, loss=1.0, project=PROJECT)
    with pytest.raises(PublishedCheckpointError, match="loss nan"):
        publish_checkpoint(source, public, KEY, epoch=5, loss=math.nan, project=PROJECT)
    with pytest.raises(PublishedCheckpointError, match=r"missing\.pt"):
        publish_checkpoint(tmp_path / "missing.pt", public, KEY, epoch=5, loss=1.0, project=PROJECT)
    assert files_in(public) == []


async def test_an_index_signed_by_another_key_is_refused(
    tmp_path: Path, public: Path, server: ShardServer
) -> None:
    publish(tmp_path, public, key=OTHER_KEY)
    dest = tmp_path / "dest"
    with pytest.raises(PublishedCheckpointError, match="not signed by the project key") as caught:
        await fetch(server.url, dest)
    assert f"{server.url}index.json" in str(caught.value)
    assert files_in(dest) == []


async def test_a_tampered_index_is_refused(
    tmp_path: Path, public: Path, server: ShardServer
) -> None:
    publish(tmp_path, public, epoch=30)
    rewrite_index(public, epoch=31)
    dest = tmp_path / "dest"
    with pytest.raises(PublishedCheckpointError, match="not signed by the project key"):
        await fetch(server.url, dest)
    assert files_in(dest) == []


async def test_a_tampered_file_is_refused(
    tmp_path: Path, public: Path, server: ShardServer
) -> None:
    publish(tmp_path, public)
    published = public / "checkpoint-00000030.pt"
    data = bytearray(published.read_bytes())
    data[len(data) // 2] ^= 0xFF
    published.write_bytes(bytes(data))
    dest = tmp_path / "dest"
    with pytest.raises(PublishedCheckpointError, match="does not match its index: SHA-256") as e:
        await fetch(server.url, dest)
    assert f"{server.url}checkpoint-00000030.pt" in str(e.value)
    assert files_in(dest) == []


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda data: data[: len(data) // 2], "is truncated"),
        (lambda data: data + b"extra", "is longer than"),
    ],
    ids=["truncated", "longer"],
)
async def test_a_file_of_the_wrong_size_is_refused(
    tmp_path: Path, public: Path, server: ShardServer, change: Any, reason: str
) -> None:
    publish(tmp_path, public)
    published = public / "checkpoint-00000030.pt"
    published.write_bytes(change(published.read_bytes()))
    dest = tmp_path / "dest"
    with pytest.raises(PublishedCheckpointError, match=reason):
        await fetch(server.url, dest)
    assert files_in(dest) == []


async def test_another_projects_checkpoint_is_refused(
    tmp_path: Path, public: Path, server: ShardServer
) -> None:
    publish(tmp_path, public)
    with pytest.raises(PublishedCheckpointError, match="of project 'test-project', not 'other'"):
        await fetch(server.url, tmp_path / "dest", project="other")


async def test_a_server_that_is_down_is_unreachable(tmp_path: Path, public: Path) -> None:
    served = ShardServer(public)
    url = await served.start()
    await served.close()
    with pytest.raises(PublishedCheckpointError, match="is unreachable") as caught:
        await fetch(url, tmp_path / "dest")
    assert url in str(caught.value)


async def test_a_missing_index_is_an_http_error(
    tmp_path: Path, public: Path, server: ShardServer
) -> None:
    with pytest.raises(PublishedCheckpointError, match="answered HTTP 404") as caught:
        await fetch(server.url + "nowhere/", tmp_path / "dest")
    assert f"{server.url}nowhere/index.json" in str(caught.value)


@pytest.mark.parametrize(
    "file", ["../checkpoint-00000030.pt", "sub/checkpoint-00000030.pt", "/tmp/checkpoint.pt"]
)
async def test_an_index_naming_a_path_is_refused(
    tmp_path: Path, public: Path, server: ShardServer, file: str
) -> None:
    index = publish(tmp_path, public)
    # signed by the right key, so only the name itself can make it fail
    forged = sign_index(
        KEY,
        project=PROJECT,
        epoch=index.epoch,
        loss=index.loss,
        file=file,
        size=index.size,
        sha256=index.sha256,
        published_at=index.published_at,
    )
    (public / INDEX_NAME).write_text(json.dumps(forged.to_json()))
    dest = tmp_path / "nested" / "dest"
    with pytest.raises(PublishedCheckpointError, match="not a plain checkpoint file name"):
        await fetch(server.url, dest)
    assert files_in(tmp_path / "nested") == []


async def test_not_an_index_and_too_large_are_refused(
    tmp_path: Path, public: Path, server: ShardServer
) -> None:
    index = publish(tmp_path, public)
    with pytest.raises(PublishedCheckpointError, match=f"more than the {index.size - 1} allowed"):
        await fetch(server.url, tmp_path / "dest", max_bytes=index.size - 1)
    rewrite_index(public, format=2)
    with pytest.raises(PublishedCheckpointError, match="format 2; this version reads format 1"):
        await fetch(server.url, tmp_path / "dest")
    (public / INDEX_NAME).write_text("<html>not found</html>")
    with pytest.raises(PublishedCheckpointError, match=r"index\.json is not JSON"):
        await fetch(server.url, tmp_path / "dest")
    assert files_in(tmp_path / "dest") == []


async def test_only_http_urls_are_fetched(tmp_path: Path, public: Path) -> None:
    publish(tmp_path, public)
    with pytest.raises(PublishedCheckpointError, match="not an http"):
        await fetch(str(public), tmp_path / "dest")
