"""Every peer of a project starts from the same weights, however many peers one process builds at
once (the engine's projects, a test's swarm), and building one leaves torch's generator as it was."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from core.project import load_manifest
from core.swarm.demo_data import DEMO_MANIFEST
from core.training.peer.recipe import build_model


def test_models_built_on_several_threads_at_once_start_alike() -> None:
    manifest = load_manifest(DEMO_MANIFEST)
    reference = [p.detach().clone() for p in build_model(manifest).parameters()]
    with ThreadPoolExecutor(4) as pool:
        models = list(pool.map(lambda _: build_model(manifest), range(8)))
    for model in models:
        for mine, theirs in zip(model.parameters(), reference, strict=True):
            assert torch.equal(mine, theirs)


def test_building_a_model_leaves_torchs_generator_as_it_was() -> None:
    manifest = load_manifest(DEMO_MANIFEST)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    build_model(manifest)
    assert torch.equal(torch.get_rng_state(), before)
