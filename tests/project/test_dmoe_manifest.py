"""The ``dmoe`` manifest: the demo loads, every bound and unknown key is refused with file, key and
reason, and readers of one kind refuse the other kind clearly (never an AttributeError)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from core.project import (
    DmoeManifest,
    Manifest,
    ManifestError,
    load_any_manifest,
    load_dmoe_manifest,
    load_manifest,
    parse_any_manifest,
    parse_dmoe_manifest,
)
from core.project.dmoe_sections import EXPERT_KINDS, EXPERT_OPTIMIZERS, GRID_PREFIX
from tests.project.test_manifest import DELETE, render, write

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "resources" / "dmoe-demo" / "project.toml"
ALBERT_DEMO = ROOT / "resources" / "demo" / "project.toml"


def base() -> dict[str, Any]:
    """A valid dmoe manifest, every section present."""
    return {
        "project": {"name": "moe-test", "kind": "dmoe"},
        "grid": {"prefix": "ffn", "shape": [4, 4]},
        "expert": {"kind": "ffn", "hidden": 16, "optimizer": "adam", "lr": 0.01, "max_batch": 64},
        "server": {"announce_ttl": 10.0, "max_queue": 128, "checkpoint_interval": 5.0},
        "trainer": {"k": 2, "k_min": 1, "beam_size": 3, "batch_size": 8},
        "data": {"dataset": "digits"},
        "network": {"initial_peers": ["/ip4/127.0.0.1/tcp/31337/p2p/12D3KooWabc"]},
    }


def edited(edits: dict[str, Any]) -> dict[str, Any]:
    document = copy.deepcopy(base())
    for dotted, value in edits.items():
        *parents, last = dotted.split(".")
        node: Any = document
        for part in parents:
            node = node[part]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return document


def test_the_demo_loads_with_each_reader_that_takes_its_kind() -> None:
    manifest = load_dmoe_manifest(DEMO)
    assert isinstance(manifest, DmoeManifest)
    assert (manifest.project.name, manifest.project.kind) == ("dmoe-demo", "dmoe")
    assert (manifest.grid.prefix, manifest.grid.shape, manifest.grid.size) == ("ffn", (4, 4), 16)
    assert (manifest.expert.kind, manifest.expert.hidden) == ("ffn", 64)
    assert manifest.data.dataset == "digits"
    assert manifest.path == DEMO
    assert load_any_manifest(DEMO) == manifest
    # the collaborative demo keeps loading unchanged, and declares the default kind
    albert = load_any_manifest(ALBERT_DEMO)
    assert isinstance(albert, Manifest)
    assert albert.project.kind == "collaborative"


def test_omitted_sections_take_their_defaults() -> None:
    text = '[project]\nname = "m"\nkind = "dmoe"\n[grid]\nprefix = "e"\nshape = [8]\n'
    manifest = parse_dmoe_manifest(text)
    assert manifest.server.experts_per_server == 4
    assert manifest.trainer.k == 4
    assert manifest.network.initial_peers == ()
    assert not manifest.access.moderated


def test_an_albert_only_reader_given_a_dmoe_manifest_says_what_it_is() -> None:
    with pytest.raises(ManifestError) as caught:
        load_manifest(DEMO)
    assert caught.value.path == DEMO
    assert caught.value.key == "project.kind"
    assert "'dmoe' project" in caught.value.reason
    assert "barnraise experts" in caught.value.reason
    with pytest.raises(ManifestError) as other:
        load_dmoe_manifest(ALBERT_DEMO)
    assert other.value.key == "project.kind"
    assert "'collaborative' project" in other.value.reason


@pytest.mark.parametrize(
    ("command", "says"),
    # the coordinator reads either kind (project and access only); a backbone is ALBERT's
    [("aux", "it has no backbone; its organizers host experts instead ('barnraise experts")],
)
def test_albert_only_commands_refuse_a_dmoe_manifest_with_a_clear_error(
    command: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from core.cli.main import main

    assert main([command, "--manifest", str(DEMO)]) == 1
    err = capsys.readouterr().err
    assert says in err
    assert "Traceback" not in err
    assert "AttributeError" not in err


BROKEN: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown section", {"model": {"kind": "x"}}, "model", "unknown section 'model'"),
    ("unknown key", {"server.max_queues": 3}, "server.max_queues", "did you mean 'max_queue'"),
    ("unknown kind", {"project.kind": "moe"}, "project.kind", "one of 'collaborative', 'dmoe'"),
    ("no grid prefix", {"grid.prefix": DELETE}, "grid.prefix", "required key is missing"),
    ("no grid", {"grid": DELETE}, "grid.prefix", "required key is missing"),
    ("dotted prefix", {"grid.prefix": "ffn.a"}, "grid.prefix", "starting with a letter"),
    ("empty shape", {"grid.shape": []}, "grid.shape", "1 to 4 dimensions, got 0"),
    ("deep shape", {"grid.shape": [2, 2, 2, 2, 2]}, "grid.shape", "1 to 4 dimensions"),
    ("zero width", {"grid.shape": [4, 0]}, "grid.shape[1]", "[1, 4096], got 0"),
    ("wide", {"grid.shape": [4097]}, "grid.shape[0]", "[1, 4096]"),
    ("large", {"grid.shape": [4096, 17]}, "grid.shape", "at most 65536 experts, got 69632"),
    ("float width", {"grid.shape": [4, 2.0]}, "grid.shape[1]", "expected integer"),
    ("expert kind", {"expert.kind": "moe"}, "expert.kind", "one of 'ffn', 'linear'"),
    ("narrow", {"expert.hidden": 0}, "expert.hidden", "[1, 65536], got 0"),
    ("too wide", {"expert.hidden": 65537}, "expert.hidden", "[1, 65536]"),
    ("optimizer", {"expert.optimizer": "lamb"}, "expert.optimizer", "one of 'adam', 'sgd'"),
    ("zero lr", {"expert.lr": 0.0}, "expert.lr", "(0.0, 10.0]"),
    ("huge lr", {"expert.lr": 11}, "expert.lr", "(0.0, 10.0]"),
    ("batch 0", {"expert.max_batch": 0}, "expert.max_batch", "[1, 65536]"),
    ("batch big", {"expert.max_batch": 65537}, "expert.max_batch", "[1, 65536]"),
    ("ttl", {"server.announce_ttl": 0.5}, "server.announce_ttl", "[1.0, 86400.0]"),
    ("ttl big", {"server.announce_ttl": 86401.0}, "server.announce_ttl", "[1.0, 86400.0]"),
    ("wait", {"server.max_wait": -0.1}, "server.max_wait", "[0.0, 60.0]"),
    ("wait big", {"server.max_wait": 61}, "server.max_wait", "[0.0, 60.0]"),
    ("queue 0", {"server.max_queue": 0}, "server.max_queue", "[1, 1048576]"),
    ("queue big", {"server.max_queue": 2**20 + 1}, "server.max_queue", "[1, 1048576]"),
    ("queue < batch", {"server.max_queue": 32}, "server.max_queue", "at least expert.max_batch"),
    ("interval", {"server.checkpoint_interval": -1.0}, "server.checkpoint_interval", "[0.0,"),
    ("interval big", {"server.checkpoint_interval": 1e6}, "server.checkpoint_interval", "86400"),
    ("updates", {"server.checkpoint_updates": -1}, "server.checkpoint_updates", "[0, 10"),
    ("updates big", {"server.checkpoint_updates": 10**9 + 1}, "server.checkpoint_updates", "[0,"),
    ("keep 0", {"server.keep_checkpoints": 0}, "server.keep_checkpoints", "[1, 1000]"),
    ("keep big", {"server.keep_checkpoints": 1001}, "server.keep_checkpoints", "[1, 1000]"),
    ("per server", {"server.experts_per_server": 0}, "server.experts_per_server", "[1, 4096]"),
    ("per server > grid", {"server.experts_per_server": 17}, "server.experts_per_server", "16"),
    ("k 0", {"trainer.k": 0}, "trainer.k", "[1, 1024]"),
    ("k > grid", {"trainer.k": 17, "trainer.beam_size": 17}, "trainer.k", "grid's 16 experts"),
    ("k_min 0", {"trainer.k_min": 0}, "trainer.k_min", "[1, 1024]"),
    ("k_min > k", {"trainer.k_min": 3}, "trainer.k_min", "at most trainer.k (2)"),
    ("beam < k", {"trainer.beam_size": 1}, "trainer.beam_size", "at least trainer.k (2)"),
    ("beam big", {"trainer.beam_size": 1025}, "trainer.beam_size", "[1, 1024]"),
    ("forward 0", {"trainer.forward_timeout": 0.0}, "trainer.forward_timeout", "(0.0, 3600.0]"),
    ("backward big", {"trainer.backward_timeout": 3601}, "trainer.backward_timeout", "3600"),
    ("batch_size 0", {"trainer.batch_size": 0}, "trainer.batch_size", "[1, 65536]"),
    ("batch > max", {"trainer.batch_size": 65}, "trainer.batch_size", "expert.max_batch (64)"),
    ("concurrency", {"trainer.concurrency": 0}, "trainer.concurrency", "[1, 1024]"),
    ("concurrency big", {"trainer.concurrency": 1025}, "trainer.concurrency", "[1, 1024]"),
    ("trainer lr", {"trainer.lr": -1.0}, "trainer.lr", "(0.0, 10.0]"),
    ("dataset", {"data.dataset": "mnist"}, "data.dataset", "one of 'digits'"),
    ("network", {"network.peer_port": 70000}, "network.peer_port", "[0, 65535]"),
    ("peers", {"network.initial_peers": ["x"]}, "network.initial_peers[0]", "multiaddr"),
    (
        "moderated without key",
        {"access": {"mode": "moderated"}},
        "access.project_key",
        "needs the project's public key",
    ),
]


@pytest.mark.parametrize(
    ("edits", "key", "reason"), [case[1:] for case in BROKEN], ids=[case[0] for case in BROKEN]
)
def test_mistakes_name_the_file_key_and_reason(
    tmp_path: Path, edits: dict[str, Any], key: str, reason: str
) -> None:
    path = write(tmp_path, render(edited(edits)))
    with pytest.raises(ManifestError) as caught:
        load_dmoe_manifest(path)
    error = caught.value
    assert (error.path, error.key) == (path, key)
    assert reason in error.reason
    assert str(error) == f"{path}: {key}: {error.reason}"
    with pytest.raises(ManifestError):  # the reader of any kind refuses it the same way
        load_any_manifest(path)


def test_the_base_and_its_bounds_are_accepted(tmp_path: Path) -> None:
    manifest = load_dmoe_manifest(write(tmp_path, render(base())))
    assert manifest.trainer.beam_size == 3
    edges = {
        "grid.shape": [4096, 16],
        "expert.hidden": 65536,
        "server.announce_ttl": 1,  # an integer where a float is expected
        "server.max_wait": 0,
        "server.checkpoint_interval": 0,
        "server.experts_per_server": 4096,
        "trainer.k": 1024,
        "trainer.beam_size": 1024,
        "trainer.k_min": 1024,
    }
    wide = load_dmoe_manifest(write(tmp_path, render(edited(edges))))
    assert wide.grid.size == 65536
    assert wide.server.announce_ttl == 1.0


def test_overrides_are_revalidated() -> None:
    manifest = parse_dmoe_manifest(render(base()))
    assert manifest.with_server(max_wait=0.5).server.max_wait == 0.5
    with pytest.raises(ManifestError, match=r"server\.max_wait"):
        manifest.with_server(max_wait=100.0)
    with pytest.raises(ManifestError, match="unknown key 'colour'"):
        manifest.with_network(colour="red")


def test_the_choices_are_those_the_expert_code_accepts() -> None:
    from core.moe.grid import _NAME
    from core.moe.server.experts import KINDS, OPTIMIZERS

    assert EXPERT_KINDS == KINDS
    assert EXPERT_OPTIMIZERS == OPTIMIZERS
    for prefix in ("ffn", "_x", "a-b_9", "A" * 64):
        assert GRID_PREFIX.fullmatch(prefix)
        assert _NAME.match(prefix)
    for prefix in ("9a", "a.b", "", "A" * 65):
        assert not GRID_PREFIX.fullmatch(prefix)
        assert not _NAME.match(prefix)


def test_the_reader_of_any_kind_keeps_the_file_guards() -> None:
    with pytest.raises(ManifestError, match="nested more than 16"):
        parse_any_manifest("a = " + "[" * 40 + "]" * 40)
    with pytest.raises(ManifestError, match="invalid TOML at line 2"):
        parse_any_manifest("[project]\nname = \n")
