"""``barnraise project check``: a manifest and its data, served by a local HTTP server on loopback."""

from __future__ import annotations

import gzip
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.cli.main import main
from core.data import ShardServerThread, train_tokenizer
from core.organize.check import check_project
from core.organize.findings import Finding
from tests.data.shards import shard_texts, write_shards

TEXTS = shard_texts(3, 20)


@pytest.fixture(scope="module")
def tokenizer_size(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A tokenizer trained on the shards' texts, and how many tokens it has."""
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    trained = train_tokenizer([text for shard in TEXTS for text in shard], 120, path)
    return path, trained.vocab_size


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder of shards (and whatever a test adds) served over HTTP on 127.0.0.1."""
    folder = tmp_path / "www"
    write_shards(folder / "shards", TEXTS, ".jsonl.gz")
    with ShardServerThread(folder) as server:
        yield folder, server.url


def manifest(
    folder: Path,
    urls: list[str],
    *,
    vocab: int,
    tokenizer: str = "tokenizer.json",
    held_out: list[str] | None = None,
) -> Path:
    path = folder / "project.toml"
    evaluation = f"\n[evaluation]\nurls = {json.dumps(held_out)}\n" if held_out else ""
    path.write_text(
        f"""
[project]
name = "checked"

[model]
vocab_size = {vocab}
max_position = 64

[data]
seq_len = 64
tokenizer = {json.dumps(tokenizer)}
tokenizer_vocab_size = {vocab}

[[data.sources]]
urls = {json.dumps(urls)}
{evaluation}"""
    )
    return path


def statuses(findings: list[Finding]) -> dict[str, str]:
    return {finding.what: finding.status for finding in findings}


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # closed again: connections are refused


def test_all_good(
    tmp_path: Path,
    served: tuple[Path, str],
    tokenizer_size: tuple[Path, int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder, url = served
    tokenizer, size = tokenizer_size
    (folder / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    urls = [f"{url}shards/shard-{i}.jsonl.gz" for i in range(3)]
    path = manifest(tmp_path, urls, vocab=size, tokenizer=f"{url}tokenizer.json")
    assert main(["project", "check", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["ok"] * 5, lines
    assert "collaborative project checked, open" in lines[0]
    assert lines[2].endswith("data.sources[0]: 3 of 3 shards reachable")
    assert "'t shard 0 line 0'" in lines[3]
    assert f"{size} tokens = model.vocab_size" in lines[4]

    assert main(["project", "check", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is True
    assert [check["status"] for check in document["checks"]] == ["ok"] * 5


def test_a_missing_shard_and_an_unreachable_server_are_named_per_url(
    tmp_path: Path,
    served: tuple[Path, str],
    tokenizer_size: tuple[Path, int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, url = served
    port = closed_port()
    urls = [
        f"{url}shards/shard-0.jsonl.gz",
        f"{url}shards/missing.jsonl.gz",
        f"http://127.0.0.1:{port}/shard.jsonl.gz",
    ]
    path = manifest(tmp_path, urls, vocab=tokenizer_size[1])
    (tmp_path / "tokenizer.json").write_bytes(tokenizer_size[0].read_bytes())
    assert main(["project", "check", str(path), "--timeout", "5"]) == 1
    captured = capsys.readouterr()
    out = captured.out
    assert f"error    data.sources[0].urls[1]: {urls[1]}: HTTP 404 Not Found" in out
    refused = f"cannot connect: 127.0.0.1:{port}: Connection refused"
    assert f"error    data.sources[0].urls[2]: {urls[2]}: {refused}" in out
    assert "error    data.sources[0]: 1 of 3 shards reachable" in out
    assert "ok       data.sources[0].urls[0] first record" in out  # the reachable one is read
    assert "Traceback" not in out + captured.err


def test_held_out_shards_are_tried_and_a_missing_one_is_named(
    tmp_path: Path,
    served: tuple[Path, str],
    tokenizer_size: tuple[Path, int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, url = served
    urls = [f"{url}shards/shard-0.jsonl.gz"]
    held_out = [f"{url}shards/shard-2.jsonl.gz", f"{url}held-out/missing.jsonl.gz"]
    path = manifest(tmp_path, urls, vocab=tokenizer_size[1], held_out=held_out)
    (tmp_path / "tokenizer.json").write_bytes(tokenizer_size[0].read_bytes())
    assert main(["project", "check", str(path), "--timeout", "5"]) == 1
    out = capsys.readouterr().out
    assert f"error    evaluation.urls[1]: {held_out[1]}: HTTP 404 Not Found" in out
    assert "error    evaluation: 1 of 2 held-out shards reachable" in out
    assert "ok       data.sources[0]: 1 of 1 shards reachable" in out
    assert "ok       data.sources[0].urls[0] first record" in out  # a training shard is read

    path = manifest(tmp_path, urls, vocab=tokenizer_size[1], held_out=held_out[:1])
    assert main(["project", "check", str(path), "--timeout", "5"]) == 0
    assert "ok       evaluation: 1 of 1 held-out shards reachable" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"this is not json\n", "cannot read shard"),
        (b'{"body": "a text under another name"}\n', "has no field 'text'"),
    ],
)
def test_a_first_record_that_cannot_be_read_is_an_error(
    tmp_path: Path, served: tuple[Path, str], content: bytes, words: str
) -> None:
    folder, url = served
    (folder / "bad.jsonl.gz").write_bytes(gzip.compress(content))
    path = manifest(tmp_path, [f"{url}bad.jsonl.gz"], vocab=100)
    findings = check_project(path, timeout=5)
    first = next(f for f in findings if f.what.endswith("first record"))
    assert first.status == "error"
    assert words in first.message
    assert statuses(findings)["data.sources[0]"] == "ok"  # reachable, just not readable


def test_the_tokenizer_must_fit_the_model(
    tmp_path: Path, served: tuple[Path, str], tokenizer_size: tuple[Path, int]
) -> None:
    _, url = served
    tokenizer, size = tokenizer_size
    (tmp_path / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    shards = [f"{url}shards/shard-0.jsonl.gz"]
    too_small = check_project(manifest(tmp_path, shards, vocab=size - 1), timeout=5)
    found = next(f for f in too_small if f.what == "data.tokenizer")
    assert found.status == "error"
    assert (
        f"has {size} tokens but model.vocab_size (= data.tokenizer_vocab_size) is {size - 1}"
        in (found.message)
    )
    roomy = check_project(manifest(tmp_path, shards, vocab=size + 10), timeout=5)
    assert statuses(roomy)["data.tokenizer"] == "warning"


def test_a_missing_tokenizer_is_a_warning(tmp_path: Path, served: tuple[Path, str]) -> None:
    _, url = served
    shards = [f"{url}shards/shard-0.jsonl.gz"]
    for tokenizer in ("tokenizer.json", f"{url}nothing-here.json"):
        findings = check_project(manifest(tmp_path, shards, vocab=100, tokenizer=tokenizer))
        found = next(f for f in findings if f.what == "data.tokenizer")
        assert found.status == "warning"
        assert "cannot train until it is there" in found.message


def test_a_damaged_tokenizer_is_an_error(tmp_path: Path, served: tuple[Path, str]) -> None:
    _, url = served
    (tmp_path / "tokenizer.json").write_text("{not a tokenizer")
    findings = check_project(manifest(tmp_path, [f"{url}shards/shard-0.jsonl.gz"], vocab=100))
    found = next(f for f in findings if f.what == "data.tokenizer")
    assert found.status == "error"
    assert "damaged or not a tokenizer" in found.message


def test_relative_paths_use_the_data_base_or_the_manifests_folder(
    tmp_path: Path, served: tuple[Path, str]
) -> None:
    folder, url = served
    path = manifest(tmp_path, ["shards/shard-1.jsonl.gz"], vocab=100)
    over_http = check_project(path, data_base=url)
    assert statuses(over_http)["data.sources[0]"] == "ok"
    first = next(f.message for f in over_http if f.what.endswith("first record"))
    assert "'t shard 1 line 0'" in first
    local = check_project(path)  # beside the manifest: nothing there
    assert statuses(local)["data.sources[0].urls[0]"] == "error"
    assert "no such file" in next(f.message for f in local if f.what.endswith("urls[0]"))
    assert statuses(check_project(path, data_base=str(folder)))["data.sources[0]"] == "ok"


def test_a_manifest_error_is_printed_as_it_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "project.toml"
    path.write_text('[project]\nname = "Bad Name"\n')
    assert main(["project", "check", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"error    manifest: {path}: project.name: must be")
    assert len(out.splitlines()) == 1
