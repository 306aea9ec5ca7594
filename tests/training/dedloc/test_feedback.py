"""ErrorFeedback on its own: leftovers join the next round, a round without a group leaves none."""

from __future__ import annotations

import torch

from core.training.dedloc.feedback import ErrorFeedback


def test_what_a_round_left_out_joins_the_next_rounds_gradients() -> None:
    feedback = ErrorFeedback()
    grads = [torch.tensor([1.0, 2.0]), torch.tensor([3.0])]
    feedback.add_to(grads)  # nothing left over yet
    assert [g.tolist() for g in grads] == [[1.0, 2.0], [3.0]]
    buffers = feedback.buffers(grads)
    assert [b.tolist() for b in buffers] == [[0.0, 0.0], [0.0]]
    buffers[0][1] = 2.0  # the codec sent the first value and left the second out
    feedback.settle(sent=True)
    later = [torch.tensor([0.5, 0.5]), torch.tensor([1.0])]
    feedback.add_to(later)
    assert [g.tolist() for g in later] == [[0.5, 2.5], [1.0]]


def test_a_round_without_a_group_leaves_nothing_over() -> None:
    feedback = ErrorFeedback()
    grads = [torch.ones(3)]
    feedback.buffers(grads)[0][0] = 5.0
    feedback.settle(sent=False)  # no group: the whole gradient was applied here
    assert feedback.residual is None
    again = [torch.ones(3)]
    feedback.add_to(again)
    assert again[0].tolist() == [1.0, 1.0, 1.0]
