"""Chunk layout over several tensors, and Moshpit's grid and group size."""

from __future__ import annotations

import numpy as np
import pytest

from core.averaging.moshpit import Grid, choose_group_size, grid_for, starting_coords
from core.averaging.round.tensors import TensorSet, layout, schema_hash
from core.codecs import AUTO, FP16, NONE


def test_chunks_cover_each_part_and_never_cross_a_tensor() -> None:
    sizes = [10, 3, 25, 1]
    parts = [12, 0, 27]
    spans = layout(sizes, parts, chunk_elements=7, codec=AUTO)
    bounds = np.cumsum([0, *sizes])
    start = 0
    for part, chunks in zip(parts, spans, strict=True):
        assert sum(s.count for s in chunks) == part
        if chunks:
            assert chunks[0].start == start
        for span in chunks:
            assert bounds[span.tensor] <= span.start < span.end <= bounds[span.tensor + 1]
            assert span.count <= 7
        start += part


def test_tensor_views_are_in_place_and_copies_are_written_back() -> None:
    direct = np.arange(6, dtype=np.float32).reshape(2, 3)
    other = np.arange(4, dtype=np.float64)
    tensors = TensorSet([direct, other])
    assert tensors.total == 10
    spans = layout(tensors.sizes, [10], 100, NONE)[0]
    tensors.view(spans[0])[:] = -1
    tensors.view(spans[1])[:] = -2
    assert (direct == -1).all()  # a float32 array is a view
    assert (other == np.arange(4)).all()  # a float64 array is a copy until commit
    tensors.commit()
    assert (other == -2).all()


def test_schema_hash_tells_layouts_apart() -> None:
    assert schema_hash([4, 5], NONE, 100) == schema_hash([4, 5], NONE, 100)
    assert schema_hash([4, 5], NONE, 100) != schema_hash([5, 4], NONE, 100)
    assert schema_hash([4, 5], NONE, 100) != schema_hash([4, 5], FP16, 100)


def test_group_size_follows_the_failure_rate() -> None:
    assert choose_group_size(40, 0.0) == 40  # reliable peers: one group, as in DeDLOC's runs
    assert choose_group_size(256, 0.01) < 256
    assert choose_group_size(256, 0.3) == 2  # very unreliable peers: pairs (decentralized SGD)
    assert choose_group_size(1, 0.1) == 1
    with pytest.raises(ValueError, match="failure_rate"):
        choose_group_size(10, 1.0)


def test_grid_keys_group_peers_that_share_all_other_coordinates() -> None:
    grid = Grid(2, 4)
    assert grid.key("g", 0, (1, 3)) == grid.key("g", 0, (2, 3)) != grid.key("g", 0, (1, 2))
    assert grid.key("g", 1, (1, 3)) == grid.key("g", 1, (1, 0))
    assert grid.advance((1, 3), 0, 2) == (2, 3)
    assert Grid.for_peers(16, 4) == Grid(2, 4)
    with pytest.raises(ValueError, match="dimensions"):
        grid.key("g", 0, (1,))
    assert grid.key("g", 0, (1, 3)) != Grid(2, 5).key("g", 0, (1, 3))  # other grids never mix


def test_the_grid_follows_the_observed_failure_rate() -> None:
    assert grid_for(16, 0.0) == Grid(1, 16)  # no failures: one group of everyone
    assert grid_for(16, 0.2) == Grid(2, 4)
    coords = starting_coords(Grid(2, 4), b"peer")
    assert coords == starting_coords(Grid(2, 4), b"peer")
    assert all(0 <= c < 4 for c in coords)
