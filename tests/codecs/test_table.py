"""The codec table: what peers already send stays as it is, lookups, an immutable table, the one in
force, and reading it without numpy or torch."""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pytest

from core.codecs import (
    AUTO,
    BLOCKWISE8,
    CODECS,
    FP16,
    NONE,
    TOPK,
    UINT8,
    Codec,
    active_codecs,
    using_codecs,
)
from core.codecs.builtin import AUTO_FP16_BELOW
from core.codecs.by_size import BySize
from core.codecs.chunks import decode, encode, encoded_size
from tests.codecs.float24 import FLOAT24, Float24


def test_the_built_in_codecs_keep_their_names_wire_ids_and_costs() -> None:
    """Peers and manifests out there use these: changing one breaks them."""
    assert [(c.name, c.wire_id, c.bytes_per_value, c.aliases) for c in CODECS] == [
        ("none", 0, 4.0, ()),
        ("fp16", 1, 2.0, ()),
        ("uint8", 2, 1.0, ("8bit",)),
        ("blockwise8", 3, 1.0, ()),
        ("auto", 9, 2.0, ()),
        ("topk", 10, 0.0175 + 8 / 4096, ()),
    ]
    assert CODECS.names == ("none", "fp16", "uint8", "blockwise8", "auto", "topk")
    assert CODECS.concrete == (NONE, FP16, UINT8, BLOCKWISE8, TOPK)
    assert CODECS.for_activations == (NONE, FP16)
    assert AUTO.resolve(AUTO_FP16_BELOW - 1) is FP16
    assert [encoded_size(c, 10_000) for c in CODECS.concrete] == [
        40_000,
        20_000,
        10_008,
        10_012,
        # 101 kept values in 3 blocks: 12-bit positions, 2-bit codes, each block's lo and hi
        203,
    ]


def test_lookups_by_name_alias_and_wire_id() -> None:
    assert CODECS.parse("blockwise8") is BLOCKWISE8
    assert CODECS.parse("8bit") is UINT8
    assert CODECS.parse("FP16") is FP16
    with pytest.raises(ValueError, match=r"unknown compression 'zip'; use one of \['8bit', 'auto'"):
        CODECS.parse("zip")
    assert CODECS.by_wire_id(9) is AUTO
    assert CODECS.by_wire_id(4) is None
    assert FP16 in CODECS
    assert FLOAT24 not in CODECS


def test_with_codec_returns_a_new_table_and_leaves_the_old_one_alone() -> None:
    wider = CODECS.with_codec(FLOAT24)
    assert wider.names == (*CODECS.names, "float24")
    assert wider.parse("f24") is FLOAT24
    assert wider.by_wire_id(77) is FLOAT24
    assert FLOAT24 not in CODECS
    with pytest.raises(ValueError, match="unknown compression"):
        CODECS.parse("float24")


def test_a_table_refuses_a_name_or_wire_id_twice_and_strangers_to_pick() -> None:
    twin = Codec("fp16", 78, bytes_per_value=2.0, make_kernel=Float24)
    with pytest.raises(ValueError, match="two codecs are called 'fp16'"):
        CODECS.with_codec(twin)
    alias = Codec("other", 78, bytes_per_value=2.0, make_kernel=Float24, aliases=("8bit",))
    with pytest.raises(ValueError, match="two codecs are called '8bit'"):
        CODECS.with_codec(alias)
    taken = Codec("other", 1, bytes_per_value=2.0, make_kernel=Float24)
    with pytest.raises(ValueError, match="share wire id 1"):
        CODECS.with_codec(taken)
    picky = Codec("picky", 78, bytes_per_value=3.0, picker=BySize(FP16, FLOAT24, below=10))
    with pytest.raises(ValueError, match=r"picks \['float24'\], not in the table"):
        CODECS.with_codec(picky)
    assert CODECS.with_codec(FLOAT24).with_codec(picky).parse("picky").resolve(10) is FLOAT24


def test_a_spec_has_a_kernel_or_a_picker_and_lower_case_names() -> None:
    with pytest.raises(ValueError, match="needs a kernel or a picker"):
        Codec("nothing", 78, bytes_per_value=1.0)
    with pytest.raises(ValueError, match="needs a kernel or a picker"):
        Codec("both", 78, 1.0, make_kernel=Float24, picker=BySize(FP16, UINT8, below=1))
    with pytest.raises(ValueError, match="lower case"):
        Codec("Loud", 78, bytes_per_value=1.0, make_kernel=Float24)
    with pytest.raises(ValueError, match="resolve it first"):
        encode(AUTO, np.ones(3, dtype=np.float32))


def test_a_table_is_in_force_inside_its_block_only() -> None:
    wider = CODECS.with_codec(FLOAT24)
    assert active_codecs() is CODECS
    with using_codecs(wider) as table:
        assert table is wider
        assert active_codecs() is wider
        with using_codecs(CODECS):
            assert active_codecs() is CODECS
        assert active_codecs() is wider
    assert active_codecs() is CODECS
    with pytest.raises(RuntimeError), using_codecs(wider):
        raise RuntimeError
    assert active_codecs() is CODECS


def test_a_kernel_is_built_once_on_first_use() -> None:
    built: list[Float24] = []

    def make() -> Float24:
        built.append(Float24())
        return built[-1]

    codec = Codec("counted", 78, bytes_per_value=3.0, make_kernel=make)
    assert built == []
    values = np.arange(5, dtype=np.float32)
    assert list(decode(codec, encode(codec, values), 5)) == list(values)
    assert len(built) == 1


def test_reading_the_table_loads_neither_numpy_nor_torch() -> None:
    """The coordinator and the engine read manifests' codec names without either."""
    code = (
        "import sys; from core.codecs import CODECS, active_codecs; "
        "assert active_codecs().parse('auto').resolve(10).name == 'fp16'; "
        "loaded = [m for m in ('numpy', 'torch') if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_copy_of_a_spec_is_the_spec() -> None:
    """Compared by identity, as enum members were: a deep-copied config keeps its codec."""
    assert copy.copy(FP16) is FP16
    assert copy.deepcopy({"codec": AUTO})["codec"] is AUTO
