"""UnsentWork: what a peer computed and has not sent yet, kept in a file across a restart.

A trainer that stops between two round ends holds work nobody has: the inner steps since its
last round end, and with a sparse codec the residual of earlier rounds. On a clean stop the
optimizer measures all of it as one pseudo-gradient (``DilocoState.end_round``) and writes it
here with its samples; the next start of the same work folder reads it back as the residual and
the carried samples, so it goes out, and is credited, with the first round after the restart
(on top of whatever outer state the peer downloads then). A file that does not fit the model is
left alone and said, never applied.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.optim.outer import F32

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UnsentWork:
    arrays: list[F32]
    samples: int
    epoch: int
    """The outer epoch the work was measured from (for the log)."""

    def save(self, path: Path) -> None:
        """Atomically: a crash mid-write leaves the previous file or none."""
        partial = path.with_name(path.name + ".partial")
        # a peer whose tokenizer and data are local files has written nothing there yet
        path.parent.mkdir(parents=True, exist_ok=True)
        with partial.open("wb") as f:
            # the tensors in order, then (samples, epoch): arr_0 ... arr_n
            np.savez(f, *self.arrays, np.array([self.samples, self.epoch], dtype=np.int64))
            f.flush()
            os.fsync(f.fileno())
        partial.replace(path)

    @staticmethod
    def load(path: Path, shapes: list[tuple[int, ...]]) -> UnsentWork | None:
        """The saved work, or None (no file, or one that does not fit ``shapes``: said)."""
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                count = len(shapes)
                if len(data.files) != count + 1:
                    log.warning("%s holds %d tensors, this model %d: it does not fit; left "
                                "alone", path, len(data.files) - 1, count)  # fmt: skip
                    return None
                arrays = [np.asarray(data[f"arr_{i}"], dtype=np.float32) for i in range(count)]
                samples, epoch = (int(v) for v in data[f"arr_{count}"])
        except (OSError, ValueError, KeyError) as exc:
            log.warning("%s: not this peer's unsent work (%s); left alone", path, exc)
            return None
        if [a.shape for a in arrays] != shapes or samples < 0:
            log.warning("%s does not fit this model's parameters; left alone", path)
            return None
        return UnsentWork(arrays, samples, epoch)
