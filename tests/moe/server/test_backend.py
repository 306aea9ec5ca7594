"""ExpertBackend: forward without side effects, backward equal to local autograd plus one update."""

from __future__ import annotations

import copy

import pytest
import torch

from core.moe.server.backend import ExpertBackend


def make_expert(uid: str = "ffn.0.0", max_batch: int = 16) -> ExpertBackend:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    return ExpertBackend(uid, module, optimizer, input_shapes=[[4]], max_batch=max_batch)


def test_info_has_inferred_output_shapes() -> None:
    expert = make_expert()
    info = expert.info
    assert (info.uid, info.dtype, info.inputs, info.outputs, info.max_batch) == (
        "ffn.0.0",
        "float32",
        [[4]],
        [[3]],
        16,
    )


def test_forward_matches_module_and_changes_nothing() -> None:
    expert = make_expert()
    before = copy.deepcopy(expert.module.state_dict())
    x = torch.randn(5, 4)
    (out,) = expert.forward([x])
    torch.testing.assert_close(out, expert.module(x))
    assert not out.requires_grad
    for name, value in expert.module.state_dict().items():
        torch.testing.assert_close(value, before[name])
    assert all(p.grad is None for p in expert.module.parameters())


def test_backward_matches_autograd_and_applies_the_optimizer_step() -> None:
    expert = make_expert()
    reference = copy.deepcopy(expert.module)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    x = torch.randn(6, 4)
    grad_out = torch.randn(6, 3)

    leaf = x.clone().requires_grad_(True)
    reference(leaf).backward(grad_out)
    ref_opt.step()

    (grad_x,) = expert.backward([x], [grad_out])
    assert leaf.grad is not None
    torch.testing.assert_close(grad_x, leaf.grad)
    for mine, theirs in zip(expert.module.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)
    assert expert.updates == 1
    assert all(p.grad is None for p in expert.module.parameters())


def test_checkpoint_round_trip_and_wrong_uid() -> None:
    expert = make_expert()
    expert.backward([torch.randn(2, 4)], [torch.randn(2, 3)])
    other = make_expert()
    other.load_state_dict(expert.state_dict())
    x = torch.randn(3, 4)
    torch.testing.assert_close(other.forward([x])[0], expert.forward([x])[0])
    assert other.updates == 1
    with pytest.raises(ValueError, match=r"ffn\.0\.0"):
        make_expert("ffn.0.1").load_state_dict(expert.state_dict())


def test_bad_shapes_are_refused() -> None:
    expert = make_expert(max_batch=4)
    with pytest.raises(ValueError, match="expected"):
        expert.forward([torch.randn(2, 5)])
    with pytest.raises(ValueError, match="expected"):
        expert.forward([torch.randn(5, 4)])  # more than max_batch
    with pytest.raises(ValueError, match="takes 1 inputs"):
        expert.forward([torch.randn(2, 4), torch.randn(2, 4)])
