"""The project manifest: the demo loads, and every kind of mistake names the file, key and reason."""

from __future__ import annotations

import copy
import json
import math
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.project import (
    Manifest,
    ManifestError,
    SourceSection,
    TrainingSection,
    load_manifest,
    parse_manifest,
)
from core.util.errors import BarnraiseError

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"
DELETE = object()


def base() -> dict[str, Any]:
    """A valid manifest, every section present."""
    return {
        "project": {"name": "test-project", "description": "for tests"},
        "model": {"vocab_size": 512, "hidden_size": 64, "num_heads": 4, "max_position": 32},
        "data": {
            "seq_len": 32,
            "tokenizer_vocab_size": 512,
            "sources": [{"urls": ["shards/a.jsonl.gz", "https://example.org/b.jsonl.gz"]}],
        },
        "training": {"target_batch_size": 64, "microbatch_size": 8, "betas": [0.9, 0.98]},
        "averaging": {"codec": "fp16", "target_group_size": 4, "min_group_size": 2},
        "network": {"initial_peers": ["/ip4/127.0.0.1/tcp/31337/p2p/12D3KooWabc"]},
    }


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string for the plain text used here
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    return repr(value)


def render(document: dict[str, Any]) -> str:
    """Enough of a TOML writer for these tests: plain keys first, then tables, then table arrays."""
    lines = [f"{k} = {toml_value(v)}" for k, v in document.items() if not isinstance(v, dict)]
    for name, table in document.items():
        if not isinstance(table, dict):
            continue
        lines.append(f"[{name}]")
        arrays = {
            k: v for k, v in table.items() if isinstance(v, list) and v and isinstance(v[0], dict)
        }
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items() if k not in arrays]
        for key, items in arrays.items():
            for item in items:
                lines.append(f"[[{name}.{key}]]")
                lines += [f"{k} = {toml_value(v)}" for k, v in item.items()]
    return "\n".join(lines) + "\n"


def edited(edits: dict[str, Any]) -> dict[str, Any]:
    """``base()`` with dotted keys set (numbers index arrays), or removed with ``DELETE``."""
    document = copy.deepcopy(base())
    for dotted, value in edits.items():
        *parents, last = dotted.split(".")
        node: Any = document
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return document


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "project.toml"
    path.write_text(text, encoding="utf-8")
    return path


LLAMA = {"model.kind": "llama-clm"}
"""Edits that make ``base()`` a causal model's manifest."""


def test_the_demo_manifest_loads() -> None:
    manifest = load_manifest(DEMO)
    assert manifest.project.name == "barnraise-demo"
    assert manifest.model.kind == "albert-mlm"
    assert manifest.data.seq_len <= manifest.model.max_position
    assert manifest.data.tokenizer_vocab_size == manifest.model.vocab_size
    (source,) = manifest.data.sources
    assert source.urls == tuple(f"shards/shard-0000{i}.jsonl.gz" for i in range(8))
    assert manifest.training.microbatch_size <= manifest.training.target_batch_size
    assert manifest.averaging.codec == "fp16"
    assert manifest.path == DEMO
    assert manifest.resolve_url(source.urls[0]) == str(DEMO.parent / "shards/shard-00000.jsonl.gz")


def test_a_causal_model_takes_its_own_keys_and_their_defaults(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path, render(edited(LLAMA))))
    model = manifest.model
    assert (model.kind, model.num_kv_heads, model.kv_heads) == ("llama-clm", 0, 4)
    assert (model.rope_theta, model.tie_embeddings) == (10000.0, True)
    edits = {
        **LLAMA,
        "model.num_kv_heads": 2,
        "model.rope_theta": 500000,
        "model.tie_embeddings": False,
        "model.embedding_size": 64,  # = hidden_size: a causal model's embedding width
    }
    model = load_manifest(write(tmp_path, render(edited(edits)))).model
    assert (model.kv_heads, model.rope_theta, model.tie_embeddings) == (2, 500000.0, False)


def test_omitted_sections_and_keys_take_their_defaults(tmp_path: Path) -> None:
    text = '[project]\nname = "p"\n[[data.sources]]\nurls = ["a.txt"]\n'
    manifest = load_manifest(write(tmp_path, text))
    assert manifest.training == TrainingSection()
    assert manifest.data.sources == (SourceSection(urls=("a.txt",)),)
    assert manifest.model.max_position == manifest.data.seq_len == 128
    assert manifest.network.initial_peers == ()


def test_values_are_normalized(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path, render(edited({"training.lr": 1, "training.eps": 1}))))
    assert manifest.training.lr == 1.0
    assert isinstance(manifest.training.lr, float)
    assert manifest.training.betas == (0.9, 0.98)
    assert isinstance(manifest.data.sources[0].urls, tuple)
    hash(manifest.data)  # frozen all the way down


def test_base_is_valid(tmp_path: Path) -> None:
    load_manifest(write(tmp_path, render(base())))


def test_checkpoint_url_is_read_and_defaults_to_empty(tmp_path: Path) -> None:
    assert load_manifest(write(tmp_path, render(base()))).network.checkpoint_url == ""
    url = "https://example.org/demo/checkpoints/"
    manifest = load_manifest(write(tmp_path, render(edited({"network.checkpoint_url": url}))))
    assert manifest.network.checkpoint_url == url


BROKEN: list[tuple[str, dict[str, Any], str, str]] = [
    # missing required
    ("no name", {"project.name": DELETE}, "project.name", "required key is missing"),
    ("no project", {"project": DELETE}, "project.name", "required key is missing"),
    ("no sources", {"data.sources": DELETE}, "data.sources", "at least one [[data.sources]]"),
    ("empty sources", {"data.sources": []}, "data.sources", "at least one"),
    ("no urls", {"data.sources.0.urls": DELETE}, "data.sources[0].urls", "required key"),
    # unknown keys, with a suggestion and the allowed keys
    (
        "typo in key",
        {"training.target_batchsize": 8},
        "training.target_batchsize",
        (
            "unknown key 'target_batchsize'; did you mean 'target_batch_size'? allowed: "
            "target_batch_size, microbatch_size, optimizer"
        ),
    ),
    ("typo in section", {"trainig": {"lr": 0.1}}, "trainig", "did you mean 'training'?"),
    ("top-level key", {"name": "x"}, "name", "unknown section 'name'; allowed: project"),
    ("source typo", {"data.sources.0.url": ["x"]}, "data.sources[0].url", "did you mean 'urls'?"),
    ("unrelated key", {"model.colour": "red"}, "model.colour", "allowed: kind, vocab_size"),
    # wrong types name what was expected and what was found
    (
        "string for int",
        {"training.target_batch_size": "64"},
        "training.target_batch_size",
        "expected integer, got string '64'",
    ),
    ("float for int", {"model.num_layers": 4.0}, "model.num_layers", "expected integer, got float"),
    ("bool for int", {"training.seed": True}, "training.seed", "expected integer, got boolean"),
    ("string for float", {"training.lr": "fast"}, "training.lr", "expected number, got string"),
    ("nan", {"training.lr": float("nan")}, "training.lr", "must be a finite number"),
    (
        "int for bool",
        {"averaging.moshpit": 1},
        "averaging.moshpit",
        "expected boolean, got integer",
    ),
    ("int for str", {"project.name": 5}, "project.name", "expected string, got integer 5"),
    (
        "glob for urls",
        {"data.sources.0.urls": "shards/*.jsonl.gz"},
        "data.sources[0].urls",
        "expected array of strings, got string",
    ),
    (
        "int in urls",
        {"data.sources.0.urls": ["a", 1]},
        "data.sources[0].urls[1]",
        "expected string",
    ),
    ("one beta", {"training.betas": [0.9]}, "training.betas", "expected array of 2 numbers"),
    ("string beta", {"training.betas": ["a", 0.9]}, "training.betas[0]", "expected number"),
    ("peers string", {"network.initial_peers": "/ip4/x"}, "network.initial_peers", "array of"),
    ("section not a table", {"model": 3}, "model", "expected a table ([model]), got integer 3"),
    ("first mistake first", {"project.name": "A", "data.seq_len": 0}, "project.name", "lower"),
    ("table of sources", {"data.sources": {"urls": ["a"]}}, "data.sources", "array of tables"),
    ("source not a table", {"data.sources": [1]}, "data.sources[0]", "expected a table"),
    # out of range
    ("bad name", {"project.name": "My Project"}, "project.name", "lowercase letters"),
    ("long name", {"project.name": "a" * 65}, "project.name", "1 to 64"),
    ("kind", {"model.kind": "gpt"}, "model.kind", "one of 'albert-mlm', 'llama-clm'; got 'gpt'"),
    ("zero vocab", {"model.vocab_size": 0}, "model.vocab_size", "must be in [1, 1048576], got 0"),
    ("dropout", {"model.dropout": 1.0}, "model.dropout", "must be in [0.0, 1.0), got 1.0"),
    ("mask_prob", {"data.mask_prob": 0.0}, "data.mask_prob", "must be in (0.0, 1.0)"),
    ("shuffle", {"data.shuffle_buffer": -1}, "data.shuffle_buffer", "in [0, 4194304], got -1"),
    ("tokenizer", {"data.tokenizer": ""}, "data.tokenizer", "must not be empty"),
    ("weight", {"data.sources.0.weight": 0}, "data.sources[0].weight", "in (0.0, 1000000.0]"),
    ("format", {"data.sources.0.format": "csv"}, "data.sources[0].format", "'parquet'"),
    ("scheme", {"data.sources.0.urls": ["ftp://h/a"]}, "data.sources[0].urls[0]", "'ftp'"),
    ("empty url", {"data.sources.0.urls": ["a", " "]}, "data.sources[0].urls[1]", "not be empty"),
    ("no urls at all", {"data.sources.0.urls": []}, "data.sources[0].urls", "not be empty"),
    ("text_field", {"data.sources.0.text_field": ""}, "data.sources[0].text_field", "empty"),
    ("optimizer", {"training.optimizer": "adagrad"}, "training.optimizer", "'lamb', 'adam'"),
    ("lr", {"training.lr": 0}, "training.lr", "must be in (0.0, 10.0], got 0.0"),
    ("decay", {"training.weight_decay": -0.1}, "training.weight_decay", "in [0.0, 10.0], got -0.1"),
    ("beta", {"training.betas": [0.9, 1.0]}, "training.betas[1]", "[0.0, 1.0)"),
    ("eps", {"training.eps": 0}, "training.eps", "in (0.0, 1.0], got 0.0"),
    ("clip", {"training.clip_norm": -1}, "training.clip_norm", "in [0.0, 1000000.0], got -1.0"),
    ("precision", {"training.precision": "fp8"}, "training.precision", "'bf16'"),
    (
        "every",
        {"training.average_state_every": 0},
        "training.average_state_every",
        "in [1, 1000000000]",
    ),
    ("seed", {"training.seed": -1}, "training.seed", "must be in [0, "),
    ("codec", {"averaging.codec": "zip"}, "averaging.codec", "'blockwise8'"),
    (
        "matchmaking",
        {"averaging.matchmaking_time": 0},
        "averaging.matchmaking_time",
        "in (0.0, 3600.0]",
    ),
    (
        "allreduce",
        {"averaging.allreduce_timeout": -1},
        "averaging.allreduce_timeout",
        "in (0.0, 3600.0]",
    ),
    ("aggregation", {"averaging.aggregation": "median"}, "averaging.aggregation", "'mean'"),
    ("clip_tau", {"averaging.clip_tau": 0}, "averaging.clip_tau", "in (0.0, 1000.0], got 0.0"),
    (
        "clip_iterations",
        {"averaging.clip_iterations": 0},
        "averaging.clip_iterations",
        "must be in [1, 100], got 0",
    ),
    (
        "clip_iterations type",
        {"averaging.clip_iterations": 2.5},
        "averaging.clip_iterations",
        "expected integer, got float 2.5",
    ),
    (
        "norm_ratio_limit",
        {"averaging.norm_ratio_limit": 1},
        "averaging.norm_ratio_limit",
        "in (1.0, 1000000.0], got 1.0",
    ),
    (
        "weight_ratio_limit",
        {"averaging.weight_ratio_limit": 0.5},
        "averaging.weight_ratio_limit",
        "in [1.0, 1000000.0], got 0.5",
    ),
    (
        "norm_ratio_limit inf",
        {"averaging.norm_ratio_limit": math.inf},
        "averaging.norm_ratio_limit",
        "must be a finite number",
    ),
    ("peer", {"network.initial_peers": ["1.2.3.4:5"]}, "network.initial_peers[0]", "multiaddr"),
    ("coordinator", {"network.coordinator_url": "ftp://x"}, "network.coordinator_url", "http(s)"),
    ("checkpoints", {"network.checkpoint_url": "/srv/ckpt"}, "network.checkpoint_url", "http(s)"),
    # rules across keys and sections
    ("seq_len", {"data.seq_len": 64}, "data.seq_len", "at most model.max_position (32), got 64"),
    (
        "tokenizer vocab",
        {"data.tokenizer_vocab_size": 4096},
        "data.tokenizer_vocab_size",
        "must equal model.vocab_size (512), got 4096",
    ),
    ("heads", {"model.num_heads": 3}, "model.hidden_size", "divisible by model.num_heads (3)"),
    (
        "steps",
        {"training.warmup_steps": 100, "training.total_steps": 100},
        "training.total_steps",
        "greater than training.warmup_steps (100), got 100",
    ),
    ("groups", {"averaging.min_group_size": 5}, "averaging.min_group_size", "at most averaging."),
    (
        "microbatch",
        {"training.microbatch_size": 128},
        "training.microbatch_size",
        "at most training.target_batch_size (64), got 128",
    ),
    # a key of one model kind set for the other is refused, never ignored
    ("albert kv heads", {"model.num_kv_heads": 2}, "model.num_kv_heads", "'llama-clm' only"),
    ("albert rope", {"model.rope_theta": 5e5}, "model.rope_theta", "'llama-clm' only"),
    ("albert untied", {"model.tie_embeddings": False}, "model.tie_embeddings", "always ties"),
    ("llama kv heads", {**LLAMA, "model.num_kv_heads": 3}, "model.num_kv_heads", "divide model."),
    ("llama kv range", {**LLAMA, "model.num_kv_heads": -1}, "model.num_kv_heads", "[0, 1024]"),
    ("llama odd heads", {**LLAMA, "model.num_heads": 64}, "model.num_heads", "even head width"),
    ("llama rope", {**LLAMA, "model.rope_theta": 0}, "model.rope_theta", "in (0.0, 1000000000.0]"),
    (
        "llama embedding",
        {**LLAMA, "model.embedding_size": 32},
        "model.embedding_size",
        "applies to kind 'albert-mlm' only",
    ),
    ("llama dropout", {**LLAMA, "model.dropout": 0.1}, "model.dropout", "has no dropout"),
    ("llama masking", {**LLAMA, "data.mask_prob": 0.3}, "data.mask_prob", "masks none"),
    # diloco and the sparse codec
    ("mode", {"training.mode": "local"}, "training.mode", "one of 'dedloc', 'diloco'"),
    ("short round", {"training.round_seconds": 0.5}, "training.round_seconds", "got 0.5"),
    ("outer lr", {"training.outer_lr": 0.0}, "training.outer_lr", "got 0"),
    ("outer momentum", {"training.outer_momentum": 1.0}, "training.outer_momentum", "got 1"),
    (
        "delayed diloco",
        {"training.mode": "diloco", "training.delay_parameter_updates": True},
        "training.delay_parameter_updates",
        "dedloc mode only",
    ),
    ("density 0", {"averaging.codec": "topk", "averaging.density": 0.0}, "averaging.density", ""),
    ("density > 1", {"averaging.codec": "topk", "averaging.density": 1.5}, "averaging.density", ""),
    (
        "density digits",
        {"averaging.codec": "topk", "averaging.density": 0.0100000001},
        "averaging.density",
        "6 significant digits",
    ),
    ("bits", {"averaging.codec": "topk", "averaging.bits": 3}, "averaging.bits", "2, 4, 8, got 3"),
    (
        "density without topk",
        {"averaging.density": 0.05},
        "averaging.density",
        "applies to 'topk' only (codec 'fp16' takes no settings)",
    ),
    ("moshpit", {"averaging.moshpit": True}, "averaging.moshpit", "does not use Moshpit"),
    (
        "topk with outer momentum",
        {"training.mode": "diloco", "averaging.codec": "topk"},
        "training.outer_momentum",
        "must be 0 with averaging.codec 'topk'",
    ),
    ("residual decay 0", {"training.residual_decay": 0.0}, "training.residual_decay", "got 0"),
    ("residual decay > 1", {"training.residual_decay": 1.5}, "training.residual_decay", "1.5"),
    (
        "residual decay of an exact codec",
        {"training.mode": "diloco", "training.residual_decay": 0.9},
        "training.residual_decay",
        "sparse codec only",
    ),
    ("work checks > 1", {"training.work_checks": 1.5}, "training.work_checks", "got 1.5"),
    (
        "work checks with dropout",
        {"model.dropout": 0.1},
        "training.work_checks",
        "forward pass without dropout",
    ),
    (
        "replayed diloco rounds with dropout",
        {"training.mode": "diloco", "model.dropout": 0.1},
        "training.work_checks",
        "forward pass without dropout",
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
        load_manifest(path)
    error = caught.value
    assert error.path == path
    assert error.key == key
    assert reason in error.reason
    assert str(error) == f"{path}: {key}: {error.reason}"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('[project]\nname = "p"\nseed =\n', 3),
        ('[project]\nname = "p"\n[model\n', 3),
        ('[project]\nname = "p"\nname = "q"\n', 3),
        ('\n\n[project]\nname = "unterminated\n', 4),
    ],
    ids=["no value", "unclosed header", "duplicate key", "unterminated string"],
)
def test_syntax_errors_give_the_line(tmp_path: Path, text: str, line: int) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert caught.value.line == line
    assert caught.value.key == ""
    assert str(caught.value).startswith(f"{path}: invalid TOML at line {line}, column ")


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no such file") as caught:
        load_manifest(tmp_path / "missing.toml")
    assert str(caught.value).startswith(str(tmp_path / "missing.toml"))
    with pytest.raises(ManifestError, match="is a folder"):
        load_manifest(tmp_path)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b'[project]\nname = "\xff"\n')
    with pytest.raises(ManifestError, match="not UTF-8"):
        load_manifest(binary)


def test_errors_from_text_and_their_kind() -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest('[project]\nname = "Bad"\n')
    assert str(caught.value).startswith("<manifest>: project.name: ")
    assert isinstance(caught.value, BarnraiseError)
    copied = pickle.loads(pickle.dumps(caught.value))
    assert (copied.path, copied.key, copied.reason) == (None, "project.name", caught.value.reason)
    with pytest.raises(ManifestError, match=r"training.lr: must be in \(0.0, 10.0\], got -1.0"):
        TrainingSection(lr=-1.0)


@pytest.mark.parametrize(
    ("url", "data_base", "expected"),
    [
        ("shards/a.jsonl.gz", None, "/srv/project/shards/a.jsonl.gz"),
        ("./a.txt", None, "/srv/project/a.txt"),
        ("https://example.org/a.gz", None, "https://example.org/a.gz"),
        ("http://example.org/a.gz", "/elsewhere", "http://example.org/a.gz"),
        ("file:///data/a.gz", None, "file:///data/a.gz"),
        ("/data/a.gz", None, "/data/a.gz"),
        ("/data/a.gz", "http://127.0.0.1:8000", "/data/a.gz"),
        ("shards/a.gz", "http://127.0.0.1:8000/demo", "http://127.0.0.1:8000/demo/shards/a.gz"),
        ("shards/a.gz", "http://127.0.0.1:8000/demo/", "http://127.0.0.1:8000/demo/shards/a.gz"),
        ("my shard.gz", "https://h/d", "https://h/d/my%20shard.gz"),
        ("shards/a.gz", "/mnt/cache", "/mnt/cache/shards/a.gz"),
    ],
)
def test_resolve_url(url: str, data_base: str | None, expected: str) -> None:
    manifest = parse_manifest(render(base()), path=Path("/srv/project/project.toml"))
    assert manifest.resolve_url(url, data_base=data_base) == expected


def test_resolve_url_without_a_manifest_file_keeps_relative_paths() -> None:
    manifest = parse_manifest(render(base()))
    assert manifest.resolve_url("shards/a.gz") == "shards/a.gz"
    assert manifest.resolve_url("shards/a.gz", data_base="/d") == "/d/shards/a.gz"


def test_with_training_revalidates(tmp_path: Path) -> None:
    path = write(tmp_path, render(base()))
    manifest = load_manifest(path)
    bigger = manifest.with_training(target_batch_size=512, lr=1)
    assert bigger.training.target_batch_size == 512
    assert bigger.training.lr == 1.0
    assert bigger.training.microbatch_size == manifest.training.microbatch_size
    assert manifest.training.target_batch_size == 64  # the original is unchanged
    assert isinstance(bigger, Manifest)
    assert bigger.path == path

    with pytest.raises(ManifestError) as caught:
        manifest.with_training(target_batch_size=4)
    assert str(caught.value) == (
        f"{path}: training.microbatch_size: must be at most training.target_batch_size (4), got 8"
    )
    with pytest.raises(ManifestError, match=r"training.target_batch_size: expected integer"):
        manifest.with_training(target_batch_size="512")
    with pytest.raises(ManifestError, match="did you mean 'target_batch_size'"):
        manifest.with_training(target_batchsize=512)


def test_with_averaging_revalidates() -> None:
    manifest = parse_manifest(render(base()))
    assert manifest.with_averaging(codec="blockwise8").averaging.codec == "blockwise8"
    with pytest.raises(ManifestError, match=r"averaging.min_group_size: must be at most"):
        manifest.with_averaging(target_group_size=1)
    with pytest.raises(ManifestError, match=r"averaging.codec: must be one of"):
        manifest.with_averaging(codec="gzip")


def test_the_package_does_not_import_torch() -> None:
    # the layer contract: the manifest is read by processes (GUI, CLI) that must start fast
    code = "import sys, core.project; sys.exit('torch' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=root, check=False).returncode == 0


def test_robust_aggregation_is_on_by_default_and_reaches_the_averager(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # core.training builds the averager's settings
    from core.averaging.robust.aggregation import AggregationConfig, Method
    from core.averaging.robust.screening import NEVER, OPPOSED_FROM
    from core.training.peer.recipe import averager_config

    default = parse_manifest(render(base()))
    assert default.averaging.aggregation == "centered_clip"
    # claims count for at most 4 medians by default
    assert averager_config(default, "trainer").aggregation == AggregationConfig(
        Method.CENTERED_CLIP, weight_ratio_limit=4.0
    )
    assert load_manifest(DEMO).averaging.aggregation == "centered_clip"
    chosen = {
        "averaging.aggregation": "mean",
        "averaging.clip_tau": 3,
        "averaging.clip_iterations": 5,
        "averaging.norm_ratio_limit": 20.5,
        "averaging.weight_ratio_limit": 2.5,
    }
    manifest = load_manifest(write(tmp_path, render(edited(chosen))))
    assert averager_config(manifest, "backbone").aggregation == AggregationConfig(
        Method.MEAN, clip_tau=3.0, clip_iterations=5, norm_ratio_limit=20.5, weight_ratio_limit=2.5
    )
    # diloco's pseudo-gradients are screened by direction as well; dedloc's gradients are not
    assert default.training.mode == "dedloc"
    assert averager_config(default, "trainer").aggregation.opposed_from is None
    diloco = load_manifest(write(tmp_path, render(edited({"training.mode": "diloco"}))))
    # and CenteredClip's clip factor makes no finding there (it grows with a member's steps);
    # its reducers keep the sums the backbone scores work by, dedloc's do not
    assert averager_config(diloco, "trainer").aggregation == AggregationConfig(
        Method.CENTERED_CLIP,
        opposed_from=OPPOSED_FROM,
        clip_finding_below=0.0,
        accuse_from=NEVER,
        weight_ratio_limit=4.0,
        alignments=True,
    )
    assert not averager_config(default, "backbone").aggregation.alignments
    # reducer verification: off unless the manifest asks for it
    assert not default.averaging.verify_reducers
    assert not averager_config(default, "trainer").verification.enabled
    verified = load_manifest(write(tmp_path, render(edited({"averaging.verify_reducers": True}))))
    assert averager_config(verified, "client").verification.enabled
    sparse = {"averaging.codec": "topk", "averaging.verify_reducers": True}
    assert averager_config(
        load_manifest(write(tmp_path, render(edited(sparse)))), "trainer"
    ).verification.enabled
    with pytest.raises(ManifestError, match="expected boolean"):
        parse_manifest(render(edited({"averaging.verify_reducers": "yes"})))


def test_diloco_with_the_sparse_codec_loads_and_builds_its_codec(tmp_path: Path) -> None:
    edits = {"training.mode": "diloco", "training.outer_lr": 1.0, "training.outer_momentum": 0.0,
             "averaging.codec": "topk", "averaging.density": 0.03, "averaging.bits": 4,
             "training.residual_decay": 0.9}  # fmt: skip
    manifest = load_manifest(write(tmp_path, render(edited(edits))))
    assert manifest.training.mode == "diloco"
    assert manifest.training.residual_decay == 0.9  # a sparse codec's residual decays
    assert (manifest.training.outer_lr, manifest.training.outer_momentum) == (1.0, 0.0)
    # dedloc mode reads no outer step: topk goes with the default momentum there
    dedloc = {"averaging.codec": "topk"}
    assert load_manifest(write(tmp_path, render(edited(dedloc)))).training.outer_momentum == 0.9
    codec = manifest.averaging.round_codec()
    assert codec.name == "topk-0.03-4bit"
    assert codec.sparse


def test_diloco_groups_wait_for_members_a_microbatch_late(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # core.training builds the averager's settings
    from core.training.peer.recipe import averager_config

    dedloc = parse_manifest(render(base()))
    wait = dedloc.averaging.matchmaking_time
    config = averager_config(dedloc, "trainer")
    assert (config.min_matchmaking_time, config.max_matchmaking_time) == (min(1.0, wait), wait)
    edits = {"training.mode": "diloco", "training.round_seconds": 90}
    diloco = load_manifest(write(tmp_path, render(edited(edits))))
    config = averager_config(diloco, "trainer")
    assert (config.min_matchmaking_time, config.max_matchmaking_time) == (30.0, 30.0)
    short = load_manifest(write(tmp_path, render(edited({**edits, "training.round_seconds": 6}))))
    assert averager_config(short, "trainer").max_matchmaking_time == wait  # never below it


@pytest.mark.parametrize("overlap", [True, False])
def test_diloco_replays_rounds_at_the_default_share_with_or_without_overlap(
    tmp_path: Path, overlap: bool
) -> None:
    """diloco's rounds are replayed at the default share whether they overlap the exchange or
    not (an overlapped round starts at the anchor too); 0 checks nothing and takes dropout."""
    from core.modes import active_modes

    spec = active_modes().parse("diloco")
    mode = {"training.mode": "diloco", "training.overlap": overlap}
    checked = load_manifest(write(tmp_path, render(edited(mode))))
    assert checked.training.work_checks == 0.1
    assert spec.checks_work(checked.training)
    off = edited({**mode, "training.work_checks": 0.0, "model.dropout": 0.1})
    assert not spec.checks_work(load_manifest(write(tmp_path, render(off))).training)


def test_dropout_is_taken_with_work_checks_off(tmp_path: Path) -> None:
    path = write(tmp_path, render(edited({"model.dropout": 0.1, "training.work_checks": 0.0})))
    manifest = load_manifest(path)
    assert (manifest.model.dropout, manifest.training.work_checks) == (0.1, 0.0)
