"""Blockwise dynamic 8-bit quantisation: the maps, the round trip's error bound per block, the
second moment's sign, zeros and constant blocks, ragged sizes, half-precision inputs, and the
lookup that stands in for bucketize."""

from __future__ import annotations

import pytest
import torch

from core.optim import quant8
from core.optim.quant8 import (
    BLOCK_SIZE,
    CodeBook,
    blocks_for,
    dequantise,
    dynamic_map,
    largest_step,
    nearest_codes,
    quantise_into,
)

SIZES = [1, 7, BLOCK_SIZE - 1, BLOCK_SIZE, BLOCK_SIZE + 1, 3 * BLOCK_SIZE + 5]


def round_trip(x: torch.Tensor, signed: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    book = CodeBook()
    codes = torch.empty(x.numel(), dtype=torch.uint8)
    absmax = torch.empty(blocks_for(x.numel()))
    quantise_into(x, codes, absmax, signed=signed, book=book)
    return dequantise(codes, absmax, x.shape, signed=signed, book=book), codes, absmax


def blockwise(x: torch.Tensor) -> list[torch.Tensor]:
    return list(x.reshape(-1).float().split(BLOCK_SIZE))


def test_the_maps_have_256_distinct_sorted_codes_spanning_the_unit_range() -> None:
    signed, unsigned = dynamic_map(True), dynamic_map(False)
    for table in (signed, unsigned):
        assert table.numel() == 256
        assert bool((table[1:] > table[:-1]).all())
        assert 0.0 in table.tolist()
        assert table.max() == 1.0
    assert signed.min() == -1.0
    assert unsigned.min() == 0.0  # the second moment's map has no negative code
    assert 0.0 < unsigned[1] <= 1e-7  # dynamic: tiny values keep a code of their own
    # the map is a pure function: built twice, the same
    assert torch.equal(dynamic_map(True), signed)


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
@pytest.mark.parametrize("size", SIZES)
def test_error_per_block_is_at_most_the_maps_step_times_the_blocks_absmax(
    size: int, signed: bool
) -> None:
    generator = torch.Generator().manual_seed(size)
    x = torch.randn(size, generator=generator) * torch.logspace(-4, 1, size)  # many decades
    if not signed:
        x = x.abs()
    y, codes, absmax = round_trip(x, signed)
    assert codes.dtype == torch.uint8
    assert absmax.numel() == blocks_for(size)
    assert absmax.dtype == torch.float32
    step = largest_step(signed)
    for block, (xs, ys) in enumerate(zip(blockwise(x), blockwise(y), strict=True)):
        assert absmax[block] == xs.abs().max()
        error = (xs - ys).abs().max()
        assert error <= step * absmax[block] * (1 + 1e-5), (block, float(error))
        # each block's largest magnitude survives exactly (the map holds 1.0)
        assert ys[xs.abs().argmax()] == xs[xs.abs().argmax()]


def test_the_unsigned_map_never_gives_a_negative_value() -> None:
    x = torch.rand(5000) * 1e-3
    x[::7] = 0.0
    x[1] = -1e-12  # a rounding error below zero is taken as 0, never kept negative
    y, _, _ = round_trip(x, signed=False)
    assert bool((y >= 0).all())
    assert y[1] == 0.0


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_zeros_and_constant_blocks_come_back_exactly(signed: bool) -> None:
    x = torch.zeros(3 * BLOCK_SIZE + 10)
    x[BLOCK_SIZE : 2 * BLOCK_SIZE] = 3.5 if not signed else -3.5
    x[2 * BLOCK_SIZE :] = 0.25
    y, codes, absmax = round_trip(x, signed)
    assert torch.equal(y, x)
    assert absmax[0] == 0.0  # an all-zero block: absmax 0, every code the zero code
    zero = CodeBook().zero_code(signed)
    assert bool((codes[:BLOCK_SIZE] == zero).all())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_inputs_quantise_within_the_same_bound(dtype: torch.dtype) -> None:
    x = (torch.randn(BLOCK_SIZE + 100, generator=torch.Generator().manual_seed(3))).to(dtype)
    y, _, absmax = round_trip(x, signed=True)
    assert y.dtype == torch.float32  # the optimizer computes in float32
    step = largest_step(True)
    for block, (xs, ys) in enumerate(zip(blockwise(x), blockwise(y), strict=True)):
        assert (xs - ys).abs().max() <= step * absmax[block] * (1 + 1e-5)


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_the_lookup_picks_the_same_code_as_bucketize(signed: bool) -> None:
    table = CodeBook().table(torch.device("cpu"), signed)
    mid = table.midpoints
    generator = torch.Generator().manual_seed(0)
    values = [
        torch.rand(100_000, generator=generator) * 2 - 1,
        (torch.rand(100_000, generator=generator) * 2 - 1) * 1e-6,
        mid,  # ties go to the lower code, as bucketize's default does
        torch.nextafter(mid, mid + 1),
        torch.nextafter(mid, mid - 1),
        table.values,
        torch.tensor([0.0, -0.0, 1e-40, -1e-40, 1.0, -1.0]),
    ]
    x = torch.cat(values)
    if not signed:
        x = x.abs()
    expected = torch.bucketize(x, mid, out_int32=True)
    assert torch.equal(nearest_codes(x, table), expected)


def test_bad_output_sizes_are_refused() -> None:
    book = CodeBook()
    x = torch.randn(10)
    with pytest.raises(ValueError, match="uint8"):
        quantise_into(x, torch.empty(9, dtype=torch.uint8), torch.empty(1), signed=True, book=book)
    with pytest.raises(ValueError, match="uint8"):
        quantise_into(x, torch.empty(10), torch.empty(1), signed=True, book=book)
    with pytest.raises(ValueError, match="absmax"):
        quantise_into(x, torch.empty(10, dtype=torch.uint8), torch.empty(2), signed=True, book=book)


def test_the_codebook_keeps_one_table_per_device_until_cleared() -> None:
    book = CodeBook()
    first = book.table(torch.device("cpu"), True)
    assert book.table(torch.device("cpu"), True) is first
    assert book.table(torch.device("cpu"), False) is not first
    book.clear()
    assert book.table(torch.device("cpu"), True) is not first


def test_slice_by_slice_gives_what_one_pass_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large tensors are quantised in block-aligned slices (bounded temporaries): the codes and
    scales must not depend on where the slices fall, a ragged last block included."""
    x = torch.randn(5 * BLOCK_SIZE + 17, generator=torch.Generator().manual_seed(3))
    x[BLOCK_SIZE : 2 * BLOCK_SIZE] *= 1000  # one loud block: its scale must stay its own
    _, whole_codes, whole_absmax = round_trip(x, signed=True)
    monkeypatch.setattr(quant8, "SLICE_ELEMENTS", 2 * BLOCK_SIZE)
    y, codes, absmax = round_trip(x, signed=True)
    assert torch.equal(codes, whole_codes)
    assert torch.equal(absmax, whole_absmax)
    # a strided (non-contiguous) destination is filled the same way
    book = CodeBook()
    wide = torch.zeros(2 * x.numel(), dtype=torch.uint8)
    strided = wide[::2]
    scales = torch.zeros(2 * blocks_for(x.numel()))[::2]
    quantise_into(x, strided, scales, signed=True, book=book)
    assert torch.equal(strided, whole_codes)
    assert torch.equal(scales, whole_absmax)
    assert torch.equal(y, dequantise(strided, scales, x.shape, signed=True, book=book))
