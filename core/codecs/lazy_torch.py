"""torch, imported by the first kernel that needs it.

Reading the codec table (the manifest, the coordinator, the engine's estimates) must not load
torch, and averaging without the float16 or blockwise codecs needs none: this one import is
where the kernels reach it, on first use (the import contracts ignore this edge and no other).
"""

from __future__ import annotations

from typing import Any


def torch() -> Any:
    import torch  # noqa: PLC0415 - on first use: the table is read in processes without torch

    return torch
