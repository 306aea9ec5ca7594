"""ModelIndex: the project key's signed word on the published model (``model.json``).

Beside each checkpoint it publishes, the backbone publishes the model in the transformers format
(``barnraise export``) packed into one zip archive, and this index::

    {"format": 1, "project": "barnraise-demo", "epoch": 30, "architecture": "AlbertForMaskedLM",
     "held_out": {"epoch": 30, "loss": 3.2, "accuracy": 0.41, "samples": 256},
     "file": "model-00000030.zip", "size": 6912345, "sha256": "<hex>",
     "published_at": 1718000000.0, "signature": "<hex>"}

``held_out`` is the newest held-out evaluation at or before the model's epoch, or null; where the
backbone computed the unigram floor (what a model that only counts tokens scores on the same text),
it carries ``"floor": 6.24`` too. The signature is the project key's over a canonical msgpack
payload of every other field, as the checkpoint's ``index.json`` is signed: a web server, mirror or
cache between the backbone and a reader cannot change the figures, the file name or the file
unnoticed. A reader that knows no floor checks the signature over four held-out figures, so an index
with a floor fails there: the coordinator serving the page must be as new as the backbone. The
archive holds one folder named after it (``model-00000030/``) that transformers' ``from_pretrained``
loads.

Here only the index itself: its fields checked, the signature, and a downloaded archive checked
against its size and SHA-256. The backbone writes it (``core.training.publish.model``), the
coordinator reads it to offer the download on the project page; neither needs the other.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.trust.identity import Identity
from core.trust.peer_id import PeerID
from core.trust.signed_index import (
    check_signed,
    index_json,
    is_int,
    is_number,
    read_common,
    read_head,
    signed_payload,
    size_and_sha256,
)
from core.util.errors import BarnraiseError

FORMAT = 1
INDEX_NAME = "model.json"
MAX_INDEX_BYTES = 64 * 1024
"""An index is a few hundred bytes; anything far larger is not one."""
_DOMAIN = "barnraise/published-model/v1"
# The only names an index may give its archive: a plain name in the folder, never a path.
FILE_NAME = re.compile(r"model-\d{8,}\.zip")
_ARCHITECTURE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,99}")
_FIELDS = (
    "project",
    "epoch",
    "architecture",
    "held_out",
    "file",
    "size",
    "sha256",
    "published_at",
    "signature",
)


class PublishedModelError(BarnraiseError):
    """A published model's index or archive that is malformed or not the project key's; the
    message names where it came from and what is wrong."""


def archive_name(epoch: int) -> str:
    """The archive of the model of ``epoch``."""
    return f"model-{epoch:08d}.zip"


@dataclasses.dataclass(frozen=True, slots=True)
class HeldOut:
    """A held-out evaluation, as the index carries it."""

    epoch: int
    loss: float
    accuracy: float
    """Share of predicted tokens guessed right, 0 to 1."""
    samples: int
    """Held-out sequences measured."""
    floor: float | None = None
    """The unigram floor on the same text; None where the backbone had none."""

    def to_json(self) -> dict[str, Any]:
        figures: dict[str, Any] = {
            "epoch": self.epoch,
            "loss": self.loss,
            "accuracy": self.accuracy,
            "samples": self.samples,
        }
        return figures if self.floor is None else {**figures, "floor": self.floor}

    def payload(self) -> list[Any]:
        # without a floor, the four figures an index signed before there was one
        figures = [int(self.epoch), float(self.loss), float(self.accuracy), int(self.samples)]
        return figures if self.floor is None else [*figures, float(self.floor)]


@dataclasses.dataclass(frozen=True, slots=True)
class ModelIndex:
    project: str
    epoch: int
    """The epoch of the checkpoint the model was exported from."""
    architecture: str
    """The transformers class that loads it (``AlbertForMaskedLM``, ``LlamaForCausalLM``)."""
    held_out: HeldOut | None
    file: str
    """The archive's name in the published folder (never a path)."""
    size: int
    sha256: str
    """The archive's SHA-256, lowercase hex."""
    published_at: float
    signature: bytes

    @property
    def folder(self) -> str:
        """The folder the archive holds, which ``from_pretrained`` loads once unpacked."""
        return self.file.removesuffix(".zip")

    @property
    def auto_class(self) -> str:
        """The transformers auto class that loads it, from its architecture's task."""
        if self.architecture.endswith("ForCausalLM"):
            return "AutoModelForCausalLM"
        if self.architecture.endswith("ForMaskedLM"):
            return "AutoModelForMaskedLM"
        return "AutoModel"

    def payload(self) -> bytes:
        """The bytes the project key signs."""
        held_out = None if self.held_out is None else self.held_out.payload()
        return signed_payload(_DOMAIN, FORMAT, self, [self.architecture, held_out])

    def to_json(self) -> dict[str, Any]:
        held_out = None if self.held_out is None else self.held_out.to_json()
        return index_json(FORMAT, self, {"architecture": self.architecture, "held_out": held_out})

    @classmethod
    def from_json(cls, raw: object, source: str) -> ModelIndex:
        """Parse an index's JSON value; ``PublishedModelError`` naming ``source`` if it is not one
        (the signature is checked by ``check``)."""

        def bad(reason: str) -> PublishedModelError:
            return PublishedModelError(f"{source} is not a valid model index: {reason}")

        fields = read_head(raw, FORMAT, _FIELDS, bad)
        architecture, held_out = fields["architecture"], fields["held_out"]
        if not isinstance(architecture, str) or _ARCHITECTURE.fullmatch(architecture) is None:
            raise bad("architecture is not the name of a transformers class")
        common = read_common(fields, FILE_NAME, "model archive", bad)
        return cls(
            architecture=architecture,
            held_out=None if held_out is None else _held_out(held_out, bad),
            **common,
        )

    def check(self, project: str, project_key: PeerID, source: str) -> None:
        """``PublishedModelError`` unless this index is for ``project`` and the project key
        signed it."""
        check_signed(self, project, project_key, source, what="a model", error=PublishedModelError)

    def check_file(self, path: Path) -> None:
        """``PublishedModelError`` unless the archive at ``path`` has the size and SHA-256 this
        index names (blocking: it reads the whole file)."""
        try:
            size, sha256 = size_and_sha256(path)
        except OSError as exc:
            raise PublishedModelError(f"cannot read the model archive {path}: {exc}") from None
        if size != self.size:
            raise PublishedModelError(
                f"{path} has {size} bytes, but its index names {self.size}: it is not the "
                "published model (truncated, or another file)"
            )
        if sha256 != self.sha256:
            raise PublishedModelError(
                f"{path} does not match its index: SHA-256 {sha256}, expected {self.sha256}"
            )


def _held_out(raw: object, bad: Callable[[str], PublishedModelError]) -> HeldOut:
    if not isinstance(raw, dict):
        raise bad("held_out is neither an object nor null")
    epoch: Any = raw.get("epoch")
    loss: Any = raw.get("loss")
    accuracy: Any = raw.get("accuracy")
    samples: Any = raw.get("samples")
    floor: Any = raw.get("floor")
    if not is_int(epoch) or epoch < 0:
        raise bad("held_out.epoch is not a whole number of 0 or more")
    if not (is_number(loss) and math.isfinite(loss) and loss >= 0):
        raise bad("held_out.loss is not a finite number of 0 or more")
    if not (is_number(accuracy) and 0 <= accuracy <= 1):
        raise bad("held_out.accuracy is not a number from 0 to 1")
    if not is_int(samples) or samples < 0:
        raise bad("held_out.samples is not a whole number of 0 or more")
    if floor is not None and not (is_number(floor) and math.isfinite(floor) and floor >= 0):
        raise bad("held_out.floor is neither null nor a finite number of 0 or more")
    return HeldOut(
        int(epoch),
        float(loss),
        float(accuracy),
        int(samples),
        None if floor is None else float(floor),
    )


def sign_model_index(
    project_key: Identity,
    *,
    project: str,
    epoch: int,
    architecture: str,
    held_out: HeldOut | None,
    file: str,
    size: int,
    sha256: str,
    published_at: float,
) -> ModelIndex:
    """An index with these fields, signed by ``project_key``; ``PublishedModelError`` for fields
    no reader would take (so that nothing unreadable is ever published)."""
    unsigned = ModelIndex(
        project, epoch, architecture, held_out, file, size, sha256, float(published_at), b""
    )
    signed = dataclasses.replace(unsigned, signature=project_key.sign(unsigned.payload()))
    ModelIndex.from_json(signed.to_json(), "the model index to publish")
    return signed
