"""What every signed index of a published file shares: the project key's word on one file in a
folder served over HTTP, be it the checkpoint's ``index.json`` (``core.training.publish.checkpoint``) or the
model's ``model.json`` (``published_model``).

Each names the project, an epoch, the file (a plain name, never a path), its size and SHA-256, when
it was published, and the project key's signature over a canonical msgpack payload of every other
field; each kind adds fields of its own between the epoch and the file. Here the checks of the
shared fields (one wording for both kinds), the payload and JSON layouts, the signature's check,
and a file's size and SHA-256 to compare with its index.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypedDict

from core.trust.peer_id import PeerID
from core.util.msgpack_codec import pack

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
SIGNATURE_HEX = re.compile(r"[0-9a-f]{128}")
_FILE_FIELDS = ("file", "size", "sha256", "published_at", "signature")
_CHUNK = 1 << 20

Bad = Callable[[str], Exception]
"""Makes the error to raise for a reason, in words of the caller that name the index and its kind."""


class SignedIndex(Protocol):
    """The fields every signed index has, and the bytes its signature covers."""

    @property
    def project(self) -> str: ...
    @property
    def epoch(self) -> int: ...
    @property
    def file(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def sha256(self) -> str: ...
    @property
    def published_at(self) -> float: ...
    @property
    def signature(self) -> bytes: ...
    def payload(self) -> bytes: ...


class CommonFields(TypedDict):
    """The shared fields of an index, checked, as keyword arguments to its class."""

    project: str
    epoch: int
    file: str
    size: int
    sha256: str
    published_at: float
    signature: bytes


def is_int(value: object) -> bool:
    # JSON's true and false are Python ints, but never a count
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def read_head(raw: object, version: int, fields: Sequence[str], bad: Bad) -> dict[str, Any]:
    """``raw`` as the JSON object of an index of format ``version`` that has all of ``fields``, its
    project a string and its epoch a whole number of 0 or more; raises ``bad(reason)`` if not."""
    if not isinstance(raw, dict):
        raise bad("not a JSON object")
    if not is_int(raw.get("format")) or raw.get("format") != version:
        raise bad(f"format {raw.get('format')!r}; this version reads format {version}")
    missing = [key for key in fields if key not in raw]
    if missing:
        raise bad(f"it lacks {', '.join(missing)}")
    if not isinstance(raw["project"], str):
        raise bad("project is not a string")
    epoch = raw["epoch"]
    if not is_int(epoch) or epoch < 0:
        raise bad(f"epoch {epoch!r} is not a whole number of 0 or more")
    return raw


def read_common(
    raw: Mapping[str, Any], file_name: re.Pattern[str], what: str, bad: Bad
) -> CommonFields:
    """The shared fields of an index that ``read_head`` took, the file's and the signature checked
    here; raises ``bad(reason)`` for one that is not valid. ``file_name`` is the only shape a file's
    name may have, ``what`` its kind in words ("checkpoint file")."""
    file, size, sha256, published_at, signature = (raw[key] for key in _FILE_FIELDS)
    if not isinstance(file, str) or file_name.fullmatch(file) is None:
        # refuses "../x", "a/b", absolute paths and URLs: the download stays in its folder
        raise bad(f"file {file!r} is not a plain {what} name")
    if not is_int(size) or size < 0:
        raise bad(f"size {size!r} is not a whole number of 0 or more")
    if not isinstance(sha256, str) or SHA256_HEX.fullmatch(sha256) is None:
        raise bad("sha256 is not 64 lowercase hex digits")
    if not (is_number(published_at) and math.isfinite(published_at)):
        raise bad("published_at is not a finite number")
    if not isinstance(signature, str) or SIGNATURE_HEX.fullmatch(signature) is None:
        raise bad("signature is not 128 lowercase hex digits")
    return CommonFields(
        project=raw["project"],
        epoch=raw["epoch"],
        file=file,
        size=size,
        sha256=sha256,
        published_at=float(published_at),
        signature=bytes.fromhex(signature),
    )


def signed_payload(domain: str, version: int, index: SignedIndex, own: Sequence[Any]) -> bytes:
    """The bytes the project key signs: the shared fields around the kind's ``own`` values, after
    a ``domain`` that keeps one kind's signature from passing for another's."""
    # msgpack, not JSON: one encoding for each value, so that what the publisher signed and what a
    # reader re-encodes after a JSON round trip are the same bytes
    return pack(
        [
            domain,
            version,
            index.project,
            int(index.epoch),
            *own,
            index.file,
            int(index.size),
            index.sha256,
            float(index.published_at),
        ]
    )


def index_json(version: int, index: SignedIndex, own: Mapping[str, Any]) -> dict[str, Any]:
    """The index as JSON: the shared fields around the kind's ``own`` ones, in the payload's order."""
    return {
        "format": version,
        "project": index.project,
        "epoch": index.epoch,
        **own,
        "file": index.file,
        "size": index.size,
        "sha256": index.sha256,
        "published_at": index.published_at,
        "signature": index.signature.hex(),
    }


def check_signed(
    index: SignedIndex, project: str, project_key: PeerID, source: str, *, what: str, error: Bad
) -> None:
    """Raises ``error(message)`` unless ``index`` (``what`` it publishes, "a model") is for
    ``project`` and the project key signed it."""
    if index.project != project:
        raise error(f"{source} publishes {what} of project {index.project!r}, not {project!r}")
    if not project_key.verify(index.signature, index.payload()):
        raise error(
            f"{source} is not signed by the project key {project_key}; "
            "it was altered, or published with another key"
        )


def size_and_sha256(path: Path) -> tuple[int, str]:
    """The size of the file at ``path`` and its SHA-256 in lowercase hex (blocking: it reads the
    whole file); ``OSError`` if it cannot be read."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as reader:
        while chunk := reader.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()
