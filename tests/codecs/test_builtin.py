"""The built-in codecs: sizes, error bounds (numpy >= 2.4), and garbage."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from core.codecs import (
    AUTO,
    AUTO_FP16_BELOW,
    BLOCKWISE8,
    CODECS,
    FP16,
    NONE,
    UINT8,
    Codec,
)
from core.codecs.blockwise8 import BLOCK
from core.codecs.chunks import decode, encode, encoded_size, max_abs_error
from core.util.errors import WireFormatError

CONCRETE = [NONE, FP16, UINT8, BLOCKWISE8]


def test_numpy_is_new_enough_to_matter() -> None:
    """hivemind's 8-bit codecs break on numpy >= 2.4; ours are tested there."""
    major, minor = (int(x) for x in np.__version__.split(".")[:2])
    assert (major, minor) >= (2, 4)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(CONCRETE),
    hnp.arrays(np.float32, st.integers(0, 3 * BLOCK + 7), elements=st.floats(-1e4, 1e4, width=32)),
)
def test_round_trip_within_the_bound(codec: Codec, values: np.ndarray) -> None:
    data = encode(codec, values)
    assert len(data) == encoded_size(codec, values.size)
    restored = decode(codec, data, values.size)
    if values.size:
        assert float(np.max(np.abs(restored - values))) <= max_abs_error(codec, values)


def test_blockwise_keeps_heavy_tails_far_better_than_uniform() -> None:
    rng = np.random.default_rng(1)
    values = rng.standard_t(2, 200_000).astype(np.float32)
    errors = {}
    for codec in (UINT8, BLOCKWISE8):
        restored = decode(codec, encode(codec, values), values.size)
        errors[codec] = float(
            np.sqrt(np.mean((restored - values) ** 2)) / np.sqrt(np.mean(values**2))
        )
    assert errors[BLOCKWISE8] < errors[UINT8] / 3


def test_auto_picks_by_tensor_size() -> None:
    assert AUTO.resolve(AUTO_FP16_BELOW - 1) is FP16
    assert AUTO.resolve(AUTO_FP16_BELOW) is BLOCKWISE8
    assert FP16.resolve(10) is FP16
    assert CODECS.parse("uint8") is UINT8
    with pytest.raises(ValueError, match="unknown compression"):
        CODECS.parse("zip")


@pytest.mark.parametrize("codec", CONCRETE)
def test_wrong_sizes_are_refused(codec: Codec) -> None:
    values = np.ones(100, dtype=np.float32)
    data = bytes(encode(codec, values))
    with pytest.raises(WireFormatError, match="expected"):
        decode(codec, data[:-1], 100)
    with pytest.raises(WireFormatError, match="expected"):
        decode(codec, data, 101)


@pytest.mark.parametrize("codec", CONCRETE)
def test_subnormal_values_stay_within_the_bound(codec: Codec) -> None:
    tiny = np.finfo(np.float32).smallest_subnormal
    values = np.array([tiny, 0.0, -3 * tiny, 1000 * tiny], dtype=np.float32)
    restored = decode(codec, encode(codec, values), values.size)
    assert float(np.max(np.abs(restored - values))) <= max_abs_error(codec, values)
