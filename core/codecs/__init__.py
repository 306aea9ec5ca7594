"""How float32 values travel: one spec per codec, in one table that every other list derives from.

A codec's spec (``Codec``) holds its name and aliases, its wire id, its kernel (encode, decode,
encoded size, error bound) or how it picks one per tensor, its rough bytes per value, and whether
the expert call's wire takes it. ``CODECS`` is the built-in table. The manifest's allowed names
and their error message (``core.project.sections``), the engine's bytes estimate
(``core.engine.join.resource_use``), the MoE wire's accepted codecs (``core.moe.protocol``), the codec
a peer averages with (``core.training.peer.recipe``), averaging's encoding (through ``chunks``) and the
benchmarks' choices all read it: adding a codec is adding one spec.

Why a package of its own, just below averaging: ``core.project`` (above averaging) reads the names,
and the coordinator, which reads manifests, may import neither averaging nor torch. The specs are
plain data; their kernels are built on first use, so reading the table loads neither numpy nor
torch, and torch is imported by ``lazy_torch`` alone (the import contracts ignore that one edge).
Why a table in force (``active``) rather than a registry: the table is immutable (``with_codec``
returns a new one), and a caller puts another in force for a ``with`` block only, which restores
it, so no mutable state outlives the block; every lookup goes through it, so a test that adds a
codec there finds it in every place that should know it.

- ``spec``        ``Codec`` (a codec's spec), the ``Kernel`` and ``Picker`` protocols, ``Tuning``
                  (what a manifest may set of a codec).
- ``table``       ``CodecTable``: immutable, by name, alias or wire id; ``with_codec``.
- ``builtin``     the shipped codecs (``NONE``, ``FP16``, ``UINT8``, ``BLOCKWISE8``, ``AUTO``,
                  ``TOPK``), their error bounds, and ``CODECS``.
- ``active``      the table in force: ``active_codecs``, ``using_codecs``.
- ``by_size``     ``BySize``: ``auto``'s choice, float16 for small tensors, blockwise 8-bit for large.
- ``chunks``      encode, decode, encoded size, error bound and warm-up for any codec (the size
                  check every codec shares).
- ``raw``         ``none``'s kernel: float32 as is.
- ``half``        ``fp16``'s kernel, on torch.
- ``uniform8``    ``uint8``'s kernel: one grid from the chunk's minimum to its maximum, on numpy.
- ``blockwise8``  ``blockwise8``'s kernel: one scale per block of 4096 values, on torch.
- ``topk``        ``topk``'s kernel: the largest values of each block at 2-8 bits with their
                  indices (a sparse codec: the mean of several goes back in a denser spec);
                  ``top_k`` makes the spec for a manifest's density and bits.
- ``arrays``      the float32 arrays and buffers kernels take, and what they share.
- ``lazy_torch``  torch, imported on first use.
"""

from core.codecs.active import active_codecs, using_codecs
from core.codecs.builtin import (
    AUTO,
    AUTO_FP16_BELOW,
    BLOCKWISE8,
    CODECS,
    FP16,
    NONE,
    TOPK,
    TOPK_BITS,
    TOPK_DENSITY,
    UINT8,
)
from core.codecs.spec import Codec, Kernel, Picker, Tuning
from core.codecs.table import CodecTable

__all__ = [
    "AUTO",
    "AUTO_FP16_BELOW",
    "BLOCKWISE8",
    "CODECS",
    "FP16",
    "NONE",
    "TOPK",
    "TOPK_BITS",
    "TOPK_DENSITY",
    "UINT8",
    "Codec",
    "CodecTable",
    "Kernel",
    "Picker",
    "Tuning",
    "active_codecs",
    "using_codecs",
]
