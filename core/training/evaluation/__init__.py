"""Measuring the model on held-out text (the manifest's ``[evaluation]``).

- ``held_out``  ``HeldOutSet``: the same sequences every time, read in file order from the held-out
  shards, tokenized and masked (or shifted, for a causal model) with a fixed seed.
- ``measure``   ``measure``: mean cross-entropy per predicted token and top-1 accuracy of a model on
  those sequences, without gradients and without changing the model's mode for good.
- ``floor``     ``project_floor``: the unigram floor, what a model that only counts tokens scores
  on the held-out set; ``below_floor`` (from ``core.util.amounts``, torch-free) says a loss
  beside it.
- ``evaluator`` ``HeldOutEvaluator``: the backbone's evaluation every ``every`` epochs, on a copy
  of its replica in a thread of its own, so that averaging never waits for it; a failure is
  logged and never stops training.
"""

from core.training.evaluation.evaluator import HeldOutEvaluator
from core.training.evaluation.floor import project_floor, unigram_floor
from core.training.evaluation.held_out import HeldOutSet, load_held_out
from core.training.evaluation.measure import Measured, measure
from core.util.amounts import below_floor

__all__ = [
    "HeldOutEvaluator",
    "HeldOutSet",
    "Measured",
    "below_floor",
    "load_held_out",
    "measure",
    "project_floor",
    "unigram_floor",
]
