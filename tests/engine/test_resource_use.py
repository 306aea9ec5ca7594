"""What a preview says a project would use: the parameter formulas equal torch's own count (the
engine computes them without torch), the estimates grow with what they should, and the update
poll looks at projects joined by URL only, again and again, each on its own interval."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from core.engine.errors import DoesNotFit
from core.engine.join import manifest_updates
from core.engine.join.manifest_updates import ManifestPoll, needs_restart
from core.engine.join.memory_fit import WARN_FRACTION, check_fit, model_fit, preview_note
from core.engine.join.resource_use import (
    albert_parameters,
    expert_parameters,
    llama_parameters,
    model_parameters,
    resource_use,
    training_state,
)
from core.engine.projects import ProjectSlot
from core.project import load_any_manifest, load_dmoe_manifest, load_manifest, parse_manifest
from core.project.compatibility import changed_keys, refusal
from core.util.errors import BarnraiseError
from core.worker.accelerator import Accelerator
from core.worker.memory import MemoryHere, memory_here
from core.worker.nvml import NvidiaGpu, NvmlReport
from tests.support.signed_project import PROJECT, project_text

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "resources" / "demo" / "project.toml"
DMOE_DEMO = ROOT / "resources" / "dmoe-demo" / "project.toml"
LARGE = ROOT / "resources" / "albert-xxlarge" / "project.toml"
LLAMA_DEMO = ROOT / "resources" / "llama-demo" / "project.toml"
ROUND_BYTES = ROOT / "docs" / "benchmarks" / "learning" / "lowcomm-round-bytes.json"


@pytest.mark.parametrize(
    "changes",
    [{}, {"hidden_size": 96, "num_heads": 3, "intermediate_size": 200, "max_position": 64}],
)
def test_the_albert_formula_counts_what_torch_builds(changes: dict[str, int]) -> None:
    torch = pytest.importorskip("torch")
    from core.models.albert import AlbertConfig, AlbertMLM

    manifest = load_manifest(DEMO)
    manifest = dataclasses.replace(manifest, model=dataclasses.replace(manifest.model, **changes))
    m = manifest.model
    torch.manual_seed(0)
    built = AlbertMLM(
        AlbertConfig(
            vocab_size=m.vocab_size,
            embedding_size=m.embedding_size,
            hidden_size=m.hidden_size,
            num_layers=m.num_layers,
            num_heads=m.num_heads,
            intermediate_size=m.intermediate_size,
            max_position=m.max_position,
        )
    )
    assert albert_parameters(manifest) == built.num_parameters()


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {
            "vocab_size": 1000,
            "embedding_size": 96,
            "hidden_size": 96,
            "num_layers": 3,
            "num_heads": 6,
            "num_kv_heads": 0,  # one key/value head per query head
            "intermediate_size": 200,
        },
    ],
)
def test_the_llama_formula_counts_what_torch_builds(changes: dict[str, int], tied: bool) -> None:
    torch = pytest.importorskip("torch")
    from core.models.llama import LlamaCLM, LlamaConfig

    manifest = load_manifest(LLAMA_DEMO)
    model = dataclasses.replace(manifest.model, tie_embeddings=tied, **changes)
    manifest = dataclasses.replace(
        manifest,
        model=model,
        data=dataclasses.replace(manifest.data, tokenizer_vocab_size=model.vocab_size),
    )
    m = manifest.model
    torch.manual_seed(0)
    built = LlamaCLM(
        LlamaConfig(
            vocab_size=m.vocab_size,
            hidden_size=m.hidden_size,
            num_layers=m.num_layers,
            num_heads=m.num_heads,
            num_kv_heads=m.kv_heads,
            intermediate_size=m.intermediate_size,
            max_position=m.max_position,
            tie_embeddings=m.tie_embeddings,
        )
    )
    assert llama_parameters(manifest) == built.num_parameters()
    assert model_parameters(manifest) == built.num_parameters()
    # and what the preview and the memory rule use
    assert resource_use(manifest, "cpu", "CPU").parameters == built.num_parameters()
    assert training_state(manifest)[0] == built.num_parameters()


@pytest.mark.parametrize("kind", ["ffn", "linear"])
def test_the_expert_formula_counts_what_torch_builds(kind: str) -> None:
    pytest.importorskip("torch")
    from core.moe.server.experts import ExpertSpec

    manifest = load_dmoe_manifest(DMOE_DEMO)
    manifest = dataclasses.replace(manifest, expert=dataclasses.replace(manifest.expert, kind=kind))
    module = ExpertSpec(kind=kind, hidden=manifest.expert.hidden).module("ffn.0.0")
    assert expert_parameters(manifest) == sum(p.numel() for p in module.parameters())


def test_estimates_follow_the_manifest() -> None:
    demo = load_manifest(DEMO)
    cpu = resource_use(demo, "cpu", "CPU (2 threads)")
    assert cpu.device == "CPU (2 threads)"
    assert cpu.parameters == albert_parameters(demo)
    assert any(note.startswith("network:") for note in cpu.notes)
    gpu = resource_use(demo, "cuda", "a GPU")
    assert gpu.network_bytes_per_hour >= cpu.network_bytes_per_hour  # faster epochs, more rounds
    published = demo.with_network(checkpoint_url="https://example.org/ckpt/")
    assert resource_use(published, "cpu", "CPU").disk_bytes > cpu.disk_bytes
    if LARGE.exists():
        large = load_any_manifest(LARGE)
        assert resource_use(large, "cpu", "CPU").parameters > 10 * cpu.parameters
    dmoe = resource_use(load_dmoe_manifest(DMOE_DEMO), "cpu", "CPU")
    assert dmoe.parameters == 4 * expert_parameters(load_dmoe_manifest(DMOE_DEMO))
    assert dmoe.disk_bytes > 0
    assert dmoe.network_bytes_per_hour > 0


def test_the_memory_rule_refuses_what_nothing_here_holds_and_warns_when_tight() -> None:
    demo = load_manifest(DEMO)
    params, needed = training_state(demo)
    assert (params, needed) == (albert_parameters(demo), params * 12.0)  # fp32 and lamb's moments
    assert training_state(demo.with_training(optimizer_states="8bit"))[1] == params * 6.0
    roomy = model_fit(demo, MemoryHere(ram_bytes=int(needed * 10)))
    assert (roomy.fits, roomy.tight, preview_note(roomy)) == (True, False, None)
    tight = model_fit(demo, MemoryHere(ram_bytes=int(needed / WARN_FRACTION) - 1))
    assert (tight.fits, tight.tight) == (True, True)
    assert check_fit(demo, tight.memory) == tight  # warned, not refused
    note = preview_note(tight)
    assert note is not None
    assert "may run out of memory" in note
    # the GPU is what trains, but the RAM (or the GPU, whichever is larger) is what can hold it
    gpu = MemoryHere(ram_bytes=int(needed * 10), gpu="a GPU (1 GB)", gpu_bytes=int(needed))
    assert (model_fit(demo, gpu).fits, model_fit(demo, gpu).tight) == (True, True)
    small = MemoryHere(ram_bytes=int(needed) - 1, gpu="a GPU", gpu_bytes=int(needed) - 1)
    with pytest.raises(DoesNotFit, match=r"420 thousand parameters.*5\.04 MB.*a GPU"):
        check_fit(demo, small)
    assert model_fit(demo, MemoryHere(ram_bytes=None)).fits  # nothing known: nothing refused
    dmoe = load_dmoe_manifest(DMOE_DEMO)
    assert model_fit(dmoe, MemoryHere(ram_bytes=1)).figures().startswith("the experts it would")


def test_the_memory_here_is_the_gpu_s_it_trains_on() -> None:
    gpus = (NvidiaGpu(0, "GPU zero", memory_mb=1024.0), NvidiaGpu(1, "GPU one", memory_mb=2048.0))
    found = Accelerator("cuda", "GPU zero (1 GB) and 1 more", "found", NvmlReport(gpus=gpus))
    auto = memory_here(found, "auto")
    assert (auto.gpu, auto.gpu_bytes) == ("GPU zero (1 GB) and 1 more", 1024**3)
    assert memory_here(found, "cuda:1").gpu_bytes == 2 * 1024**3
    assert memory_here(found, "cpu").gpu is None
    assert memory_here(None, "auto").gpu is None
    cpu_only = Accelerator("cpu", "CPU", "no GPU")
    assert memory_here(cpu_only, "auto").gpu is None
    assert memory_here(cpu_only, "cuda:0").gpu == "cuda:0"  # asked for, not found: no figure
    assert memory_here(found, "auto").ram_bytes == memory_here(None, None).ram_bytes


def test_a_diloco_project_costs_one_exchange_a_round() -> None:
    """The same model: dedloc averages every (short) epoch and the state too, diloco exchanges
    once a round whatever the device, far less; sparse, less again. One topk round's bytes per
    parameter are what the benchmark measured from the codec's output."""
    demo = load_manifest(DEMO)
    diloco = demo.with_training(mode="diloco", outer_momentum=0.0)
    dedloc_cpu = resource_use(demo, "cpu", "CPU").network_bytes_per_hour
    dense = resource_use(diloco, "cpu", "CPU")
    assert 0 < dense.network_bytes_per_hour < dedloc_cpu / 5
    assert resource_use(diloco, "cuda", "a GPU") == dataclasses.replace(dense, device="a GPU")
    assert "every 60 s (a round)" in dense.notes[1]
    longer = resource_use(diloco.with_training(round_seconds=120.0), "cpu", "CPU")
    assert longer.network_bytes_per_hour == pytest.approx(dense.network_bytes_per_hour / 2, 1e-6)
    sparse = resource_use(diloco.with_averaging(codec="topk"), "cpu", "CPU")
    assert 0 < sparse.network_bytes_per_hour < dense.network_bytes_per_hour / 5
    assert 0 < sparse.network_bytes_per_hour < dedloc_cpu / 50

    rounds = json.loads(ROUND_BYTES.read_text())["round_bytes"]
    (measured,) = [r for r in rounds if r["group"] == 4]
    four = diloco.with_averaging(codec="topk", target_group_size=4)
    per_hour = resource_use(four, "cpu", "CPU").network_bytes_per_hour
    sent = per_hour * four.training.round_seconds / 3600 / 2  # half of it is received
    assert sent / albert_parameters(four) == pytest.approx(
        measured["bytes_one_member_sends"] / measured["parameters"], rel=0.05
    )


def test_which_changes_are_taken_and_which_restart_the_peer() -> None:
    old = parse_manifest(project_text(None))
    peers = parse_manifest(project_text(None, peers=["/ip4/192.0.2.1/tcp/1/p2p/12D3KooWx"]))
    assert refusal(old, peers) is None
    assert changed_keys(old, peers) == ["network.initial_peers"]
    assert not needs_restart(changed_keys(old, peers))
    numbers = parse_manifest(project_text(None, lr=0.5))
    assert refusal(old, numbers) is None
    assert needs_restart(changed_keys(old, numbers))
    model = parse_manifest(project_text(None, hidden_size=64))
    assert refusal(old, model) == (
        "the update changes model.hidden_size from 128 to 64, which would break training; "
        "the project's organizer must start a new project"
    )
    renamed = parse_manifest(project_text(None, name="another"))
    assert "not of 'url-test'" in (refusal(old, renamed) or "")
    dmoe = load_dmoe_manifest(DMOE_DEMO)
    wider = dataclasses.replace(dmoe, grid=dataclasses.replace(dmoe.grid, shape=(4, 5)))
    assert "grid.shape from [4, 4] to [4, 5]" in (refusal(dmoe, wider) or "")
    same_name = dataclasses.replace(dmoe, project=dataclasses.replace(dmoe.project, name=PROJECT))
    assert "project.kind from 'collaborative' to 'dmoe'" in (refusal(old, same_name) or "")


async def test_the_poll_looks_at_url_projects_again_and_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(manifest_updates, "FIRST_LOOK", 0.0)
    by_url = ProjectSlot("joined", "", Path("/m.toml"), source_url="https://c.example.org")
    by_file = ProjectSlot("filed", "", Path("/f.toml"))
    broken = dataclasses.replace(by_url, name="broken", source_url="https://b.example.org")
    looked: list[str] = []
    enough = asyncio.Event()

    async def check(slot: ProjectSlot) -> float:
        looked.append(slot.name)
        if looked.count("joined") >= 3:
            enough.set()
        if slot.name == "broken":
            raise BarnraiseError("it never answers")  # logged; the others go on
        return 0.01

    poll = ManifestPoll(lambda: [by_url, by_file, broken], check)
    task = asyncio.create_task(poll.run())
    try:
        await asyncio.wait_for(enough.wait(), 10)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert "filed" not in looked
    assert looked.count("broken") == 1  # after a failure it waits the long interval
