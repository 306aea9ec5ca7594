"""The sparse top-k kernel: which values it keeps (checked against a plain per-block reference),
how close they come back, its sizes, its wire layout, its bound, and garbage."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from core.codecs import Kernel
from core.codecs.chunks import decode, encode, encoded_size, max_abs_error
from core.codecs.topk import TopK, top_k
from core.util.errors import WireFormatError

BLOCK = 256
SETTINGS = [(0.05, 2), (0.1, 4), (0.02, 8), (0.1, 16), (0.3, 2)]


def reference_kept(values: np.ndarray, kernel: TopK) -> np.ndarray:
    """Per block, the positions of its kept(n) largest magnitudes, ties to the first."""
    kept = []
    for start in range(0, values.size, kernel.block):
        block = values[start : start + kernel.block]
        order = np.argsort(-np.abs(block.astype(np.float64)), kind="stable")
        kept.append(np.sort(order[: kernel.kept(block.size)]) + start)
    return np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)


def round_trip(kernel: Kernel, values: np.ndarray) -> np.ndarray:
    data = bytes(kernel.encode(values))
    assert len(data) == kernel.encoded_size(values.size)
    out = np.full(values.size, np.nan, dtype=np.float32)
    kernel.decode(data, values.size, out)
    return out


@pytest.mark.parametrize(("density", "bits"), SETTINGS)
@pytest.mark.parametrize("count", [1, 7, BLOCK + 1, 3 * BLOCK + 17])
def test_keeps_the_largest_magnitudes_of_each_block(density: float, bits: int, count: int) -> None:
    values = np.random.default_rng(count + bits).standard_normal(count).astype(np.float32)
    kernel = TopK(density, bits, block=BLOCK)
    restored = round_trip(kernel, values)
    kept = reference_kept(values, kernel)
    np.testing.assert_array_equal(kernel.select(values), kept)
    dropped = np.ones(count, dtype=bool)
    dropped[kept] = False
    assert np.all(restored[dropped] == 0.0)
    if bits == 16:
        np.testing.assert_array_equal(restored[kept], values[kept].astype(np.float16))
        return
    # with 4 bits and more one level is kept for an exact zero
    steps = (1 << (bits - 1)) - (bits >= 4)
    for start in range(0, count, BLOCK):
        in_block = kept[(kept >= start) & (kept < start + BLOCK)]
        magnitudes = np.abs(values[in_block]).astype(np.float64)
        step = (magnitudes.max() - magnitudes.min()) / (2 * steps)
        error = np.abs(restored[in_block].astype(np.float64) - values[in_block])
        assert error.max() <= step * 1.000001 + 2.0**-23 * magnitudes.max()  # float32 rounding
        assert np.all(np.signbit(restored[in_block]) == np.signbit(values[in_block]))


def test_ties_go_to_the_first_positions() -> None:
    values = np.array([1, -2, 2, 0, -2, 2, 1, 0], dtype=np.float32)
    kernel = TopK(0.25, 16, block=8)  # keeps 2 of 8: the first two of the four 2s
    np.testing.assert_array_equal(kernel.select(values), [1, 2])
    zeros = np.zeros(10, dtype=np.float32)
    np.testing.assert_array_equal(TopK(0.2, 2, block=5).select(zeros), [0, 5])


@pytest.mark.parametrize("bits", [2, 4, 8, 16])
@pytest.mark.parametrize("fan_in", [1, 3])
def test_the_size_depends_on_the_count_alone(bits: int, fan_in: int) -> None:
    kernel = TopK(0.03, bits, fan_in, block=BLOCK)
    rng = np.random.default_rng(bits)
    for count in (0, 1, 7, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 17):
        for values in (rng.standard_normal(count), np.zeros(count)):
            data = kernel.encode(values.astype(np.float32))
            assert len(data) == kernel.encoded_size(count)


def test_kept_counts() -> None:
    kernel = TopK(0.01, 2, 3)
    assert [kernel.kept(n) for n in (0, 1, 100, 4096)] == [0, 1, 3, 123]
    assert TopK(0.5, 2, 4).kept(10) == 10
    assert TopK(1.0, 8).kept(4096) == 4096


def test_the_wire_layout() -> None:
    """lo and hi per block, the positions, then the codes (sign on top, first code lowest); float16
    values come before the positions."""
    values = np.array([1, -3, 0.5, 2], dtype=np.float32)
    data = bytes(TopK(0.5, 2, block=4).encode(values))
    # -3: sign 1, level 1 (the top of [2, 3]); 2: sign 0, level 0
    # positions 1 and 3 in 12 bits each: 0x001 | 0x003 << 12, three bytes
    assert data == struct.pack("<ff", 2.0, 3.0) + bytes([0x01, 0x30, 0x00, 0b0011])
    halves = bytes(TopK(0.5, 16, block=4).encode(values))
    assert halves == struct.pack("<ee", -3.0, 2.0) + bytes([0x01, 0x30, 0x00])
    # blocks longer than 4096 values send uint16 positions
    assert bytes(TopK(0.5, 16, block=8192).encode(values)) == struct.pack("<eeHH", -3.0, 2.0, 1, 3)


@pytest.mark.parametrize("fan_in", [2, 5])
def test_a_sum_of_sparse_contributions_goes_through_whole(fan_in: int) -> None:
    density = 0.03
    one = TopK(density, 16, block=BLOCK)
    count = 4 * BLOCK + 100
    rng = np.random.default_rng(fan_in)
    total = np.zeros(count, dtype=np.float32)
    for _ in range(fan_in):
        contribution = np.zeros(count, dtype=np.float32)
        for start in range(0, count, BLOCK):
            n = min(BLOCK, count - start)
            support = rng.choice(n, one.kept(n), replace=False) + start
            contribution[support] = rng.standard_normal(support.size)
        np.testing.assert_array_equal(
            round_trip(one, contribution), contribution.astype(np.float16)
        )
        total += contribution
    restored = round_trip(TopK(density, 16, fan_in, block=BLOCK), total)
    np.testing.assert_array_equal(restored, total.astype(np.float16))
    # the way a mean goes back: 8-bit codes, zeros where nobody sent, the rest within the bound
    back = TopK(density, 8, fan_in, block=BLOCK)
    restored = round_trip(back, total)
    np.testing.assert_array_equal(restored == 0, total == 0)
    assert np.max(np.abs(restored - total)) <= back.error_bound(total)
    assert np.all(np.signbit(restored[total != 0]) == np.signbit(total[total != 0]))


@pytest.mark.parametrize("bits", [2, 8, 16])
def test_density_one_keeps_everything(bits: int) -> None:
    values = np.random.default_rng(3).standard_normal(2 * BLOCK + 5).astype(np.float32)
    kernel = TopK(1.0, bits, block=BLOCK)
    restored = round_trip(kernel, values)
    assert np.all(restored != 0.0)
    assert np.max(np.abs(restored - values)) <= kernel.error_bound(values)
    if bits == 16:
        np.testing.assert_array_equal(restored, values.astype(np.float16))


def test_equal_magnitudes_and_zeros_are_exact() -> None:
    values = np.array([0.75, -0.75, 0.75, 0.75, 0, 0, 0, 0, 0.5, 0.25], dtype=np.float32)
    kernel = TopK(0.5, 2, block=4)  # the first block keeps two of four equal magnitudes
    np.testing.assert_array_equal(
        round_trip(kernel, values), [0.75, -0.75, 0, 0, 0, 0, 0, 0, 0.5, 0]
    )


@pytest.mark.parametrize(
    ("density", "bits", "fan_in", "block"),
    [(0.01, 2, 1, 4096), (0.05, 4, 2, 1000), (0.2, 8, 1, 64), (0.1, 16, 3, 4096), (1.0, 2, 1, 7)],
)
def test_the_bound_holds_on_random_data(density: float, bits: int, fan_in: int, block: int) -> None:
    kernel = TopK(density, bits, fan_in, block)
    rng = np.random.default_rng(block)
    heavy = rng.standard_t(2, 3 * block + 11) * 100
    sparse = np.where(rng.random(3 * block + 11) < 0.05, rng.standard_normal(3 * block + 11), 0)
    for values in (rng.standard_normal(20_000), heavy, sparse, np.full(9, -4.0)):
        values32 = values.astype(np.float32)
        error = np.max(np.abs(round_trip(kernel, values32) - values32))
        assert error <= kernel.error_bound(values32)
        assert kernel.error_bound(values32) <= np.max(np.abs(values32)) * 1.001 + 1e-30


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(SETTINGS),
    hnp.arrays(np.float32, st.integers(1, 3 * 64 + 7), elements=st.floats(-1e4, 1e4, width=32)),
)
def test_round_trip_within_the_bound(setting: tuple[float, int], values: np.ndarray) -> None:
    codec = top_k(*setting)
    kernel = TopK(*setting, block=64)  # small blocks: several of them, and a short one
    for check in (codec.kernel, kernel):
        restored = round_trip(check, values)
        assert float(np.max(np.abs(restored - values))) <= check.error_bound(values)
    restored = decode(codec, encode(codec, values), values.size)
    assert float(np.max(np.abs(restored - values))) <= max_abs_error(codec, values)


def test_the_same_values_give_the_same_bytes() -> None:
    rng = np.random.default_rng(5)
    values = np.round(rng.standard_normal(3 * 4096 + 5), 1).astype(np.float32)  # many ties
    for bits in (2, 16):
        kernel = TopK(0.01, bits)
        assert bytes(kernel.encode(values)) == bytes(kernel.encode(values.copy()))


def test_non_finite_values_do_not_fail() -> None:
    values = np.ones(4 * 8, dtype=np.float32)  # the last block is finite
    values[[1, 9, 17]] = [np.nan, np.inf, -np.inf]
    values[[2, 10, 18]] = 0.5
    restored = round_trip(TopK(0.25, 16, block=8), values)
    assert math.isnan(restored[1])
    assert restored[9] == 65504.0
    assert restored[17] == -65504.0
    restored = round_trip(TopK(0.25, 2, block=8), values)
    assert np.all(~np.isfinite(restored[[1, 9, 17]]))
    np.testing.assert_array_equal(restored[24:], [1, 1, 0, 0, 0, 0, 0, 0])
    assert TopK(0.25, 2, block=8).error_bound(values) == math.inf
    with np.errstate(all="raise"):  # no warning either
        TopK(0.25, 2, block=8).encode(values)
        TopK(0.25, 16, block=8).encode(values)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((0.0, 2), "density"),
        ((-0.1, 2), "density"),
        ((1.5, 2), "density"),
        ((math.nan, 2), "density"),
        ((0.1, 3), "bits"),
        ((0.1, 32), "bits"),
        ((0.1, 2, 0), "fan_in"),
        ((0.1, 2, 1, 0), "block"),
        ((0.1, 2, 1, 65537), "block"),
    ],
)
def test_bad_settings_are_refused(arguments: tuple[float, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TopK(*arguments)  # type: ignore[arg-type]
    if len(arguments) < 4:
        with pytest.raises(ValueError, match=message):
            top_k(*arguments)  # type: ignore[arg-type]
    assert TopK(1.0, 16, 1, 65536).block == 65536


def test_specs_name_their_setting() -> None:
    codec = top_k(0.01, 2)
    assert codec.name == "topk-0.01-2bit"
    assert top_k(0.01, 2, 4).name == "topk-0.01-2bit-x4"
    assert codec.wire_id == top_k(0.01, 2).wire_id >= 1000
    ids = {
        top_k(d, b, f).wire_id for d in (0.01, 0.001, 1.0) for b in (2, 4, 8, 16) for f in (1, 2)
    }
    assert len(ids) == 24
    assert codec.kernel == TopK(0.01, 2)
    # 12-bit positions, 2-bit codes, and each block's two float32 bounds
    assert codec.bytes_per_value == pytest.approx(0.01 * 1.75 + 8 / 4096)
    # a mean goes back as dense as one contribution (its largest values), at 8 bits
    assert top_k(0.5, 2).for_sum(4).bytes_per_value == 1.25 + 8 / 4096
    assert codec.concrete
    with pytest.raises(ValueError, match="name"):
        top_k(0.01000001, 2)  # its name would say 0.01


def test_wrong_sizes_and_garbage_are_refused() -> None:
    codec = top_k(0.1, 4)
    values = np.random.default_rng(0).standard_normal(5000).astype(np.float32)
    data = bytes(encode(codec, values))
    with pytest.raises(WireFormatError, match="expected"):
        decode(codec, data[:-1], values.size)
    with pytest.raises(WireFormatError, match="expected"):
        decode(codec, data + b"\0", values.size)
    with pytest.raises(WireFormatError, match="expected"):
        decode(codec, data, values.size + 100)
    assert encoded_size(codec, values.size) == len(data)
    np.testing.assert_array_equal(
        decode(codec, memoryview(data), values.size), decode(codec, bytearray(data), values.size)
    )
    kernel = codec.kernel
    assert isinstance(kernel, TopK)
    kept = kernel.total_kept(values.size)
    head = 2 * 8  # two blocks' lo and hi come first
    stop = head + kernel.position_bytes(kept)
    indices = kernel.unpack_positions(data, head, kept)

    def with_positions(changed: np.ndarray) -> bytes:
        return data[:head] + bytes(kernel.pack_positions(changed.astype(np.uint16))) + data[stop:]

    beyond = indices.copy()
    beyond[-1] = 4000  # the second block holds 904 values
    with pytest.raises(WireFormatError, match="beyond"):
        decode(codec, with_positions(beyond), values.size)
    swapped = indices.copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    with pytest.raises(WireFormatError, match="ascend"):
        decode(codec, with_positions(swapped), values.size)
