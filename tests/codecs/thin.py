"""A sparse codec that Barnraise does not ship, for tests that add one to the table: top-k's kernel
under another name, taking the manifest's ``density`` and only 4 or 8 ``bits``."""

from __future__ import annotations

from core.codecs import Codec, Kernel, Tuning


def _kernel() -> Kernel:
    from core.codecs.topk import TopK

    return TopK(0.05, 8)


def _at(density: float, bits: int) -> Codec:
    from core.codecs.topk import top_k

    return top_k(density, bits)


def _summed(contributions: int) -> Codec:
    from core.codecs.topk import top_k

    return top_k(0.05, 8, contributions)


THIN = Codec(
    "thin",
    78,
    bytes_per_value=0.05 * 2.5,
    make_kernel=_kernel,
    tuning=Tuning(bits=(4, 8), make=_at),
    summed=_summed,
    whole=_summed,
)
