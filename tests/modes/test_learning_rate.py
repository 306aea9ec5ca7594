"""The rate a mode's optimizer steps at: dedloc's ``lr`` as given, diloco's inner steps scaled by
the square-root rule from the collaboration's batch to one microbatch, unless ``inner_lr`` says."""

from __future__ import annotations

import dataclasses
import math

import pytest

from core.modes.builtin import DEDLOC, DILOCO
from core.project import ManifestError, load_manifest
from core.project.sections import TrainingSection
from core.swarm.demo_data import DEMO_MANIFEST


@pytest.mark.parametrize(
    ("mode", "values", "rate"),
    [
        (DEDLOC, {"lr": 0.01, "microbatch_size": 16, "target_batch_size": 256}, 0.01),
        (DILOCO, {"lr": 0.01, "microbatch_size": 16, "target_batch_size": 256}, 0.0025),
        (DILOCO, {"lr": 0.01, "microbatch_size": 64, "target_batch_size": 256}, 0.005),
        # a step of the whole batch: the rate lr was chosen for
        (DILOCO, {"lr": 0.01, "microbatch_size": 256, "target_batch_size": 256}, 0.01),
        (
            DILOCO,
            {"lr": 0.01, "microbatch_size": 16, "target_batch_size": 256, "inner_lr": 0.004},
            0.004,
        ),
        (DEDLOC, {"lr": 0.01, "inner_lr": 0.004, "target_batch_size": 256}, 0.01),
    ],
)
def test_each_mode_steps_at_its_rate(mode: object, values: dict[str, float], rate: float) -> None:
    training = TrainingSection(**values)  # type: ignore[arg-type]
    assert mode.learning_rate(training) == pytest.approx(rate)  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad", [-0.001, 11.0, math.nan])
def test_an_inner_rate_out_of_range_is_refused_by_name(bad: float) -> None:
    with pytest.raises(ManifestError, match="inner_lr"):
        TrainingSection(inner_lr=bad)


@pytest.mark.parametrize(("mode", "rate"), [("dedloc", 0.01), ("diloco", 0.0025)])
def test_the_peers_optimizer_takes_the_modes_rate(mode: str, rate: float) -> None:
    from core.training.peer.recipe import build_model, build_optimizer

    demo = load_manifest(DEMO_MANIFEST)
    assert demo.training.lr == 0.01  # the demo's rate, chosen for steps of 256 samples
    manifest = dataclasses.replace(demo, training=dataclasses.replace(demo.training, mode=mode))
    optimizer = build_optimizer(build_model(manifest), manifest)
    assert [group["lr"] for group in optimizer.param_groups] == [
        pytest.approx(rate) for _ in optimizer.param_groups
    ]
