"""The sections of a project manifest, each a frozen dataclass that validates itself.

Field annotations are the schema (``validation.FieldCheck`` reads them) and defaults are what an
omitted key means. Model settings stay plain values here; the training layer builds its model
configuration from them, so that this package never imports torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from core.net.errors import PeerIdError
from core.net.peer_id import PeerID
from core.net.ports import AUX_PORT, PEER_PORT
from core.project.validation import FieldCheck

PROJECT_NAME = re.compile(r"[a-z0-9-]{1,64}")
MODEL_KINDS = ("albert-mlm",)
DATA_FORMATS = ("auto", "jsonl", "parquet", "text")
OPTIMIZERS = ("lamb", "adam", "adamw", "sgd")
PRECISIONS = ("auto", "fp32", "fp16", "bf16")
CODECS = ("none", "fp16", "uint8", "blockwise8", "auto")
URL_SCHEMES = ("file", "http", "https")
ACCESS_MODES = ("open", "moderated")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True)
class ProjectSection:
    KEY: ClassVar[str] = "project"
    name: str
    """Names the swarm: peers of one project find each other under it."""
    description: str = ""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.matches("name", PROJECT_NAME, "1 to 64 lowercase letters, digits or '-'")


@dataclass(frozen=True)
class ModelSection:
    KEY: ClassVar[str] = "model"
    kind: str = "albert-mlm"
    vocab_size: int = 4096
    embedding_size: int = 64
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 256
    max_position: int = 128
    dropout: float = 0.0

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.one_of("kind", MODEL_KINDS)
        for name in (
            "vocab_size",
            "embedding_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "max_position",
        ):
            check.in_range(name, 1)
        check.in_range("dropout", 0.0, 1.0, high_open=True)
        if self.hidden_size % self.num_heads:
            check.fail(
                "hidden_size",
                f"must be divisible by model.num_heads ({self.num_heads}), got {self.hidden_size}",
            )


@dataclass(frozen=True)
class SourceSection:
    """One ``[[data.sources]]`` table: shards read in turn, drawn from in proportion to ``weight``."""

    KEY: ClassVar[str] = "data.sources"
    urls: tuple[str, ...]
    """Relative paths (to the manifest, or to where the swarm serves shards), absolute paths,
    file://, http:// or https:// URLs."""
    weight: float = 1.0
    format: str = "auto"
    text_field: str = "text"

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.not_empty("urls")
        for i, url in enumerate(self.urls):
            if not url.strip():
                check.fail(f"urls[{i}]", "must not be empty")
            scheme = _SCHEME.match(url)
            if scheme and scheme.group(1).lower() not in URL_SCHEMES:
                check.fail(
                    f"urls[{i}]",
                    f"unsupported scheme {scheme.group(1)!r}; use a path, file://, http:// "
                    f"or https://, got {url!r}",
                )
        check.in_range("weight", 0.0, low_open=True)
        check.one_of("format", DATA_FORMATS)
        check.not_empty("text_field")


@dataclass(frozen=True)
class DataSection:
    KEY: ClassVar[str] = "data"
    seq_len: int = 128
    """Tokens per sample; at most ``model.max_position``."""
    shuffle_buffer: int = 10000
    """Samples held for shuffling; 0 keeps the order of the files."""
    mask_prob: float = 0.15
    tokenizer: str = "tokenizer.json"
    """Path (relative to the manifest) or URL; training creates it from the data if missing."""
    tokenizer_vocab_size: int = 4096
    """Must equal ``model.vocab_size``."""
    sources: tuple[SourceSection, ...] = ()

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.in_range("seq_len", 1)
        check.in_range("shuffle_buffer", 0)
        check.in_range("mask_prob", 0.0, 1.0, low_open=True, high_open=True)
        check.not_empty("tokenizer")
        check.in_range("tokenizer_vocab_size", 1)
        if not self.sources:
            check.fail("sources", "at least one [[data.sources]] table is required")


@dataclass(frozen=True)
class TrainingSection:
    KEY: ClassVar[str] = "training"
    target_batch_size: int = 4096
    """Samples the whole swarm processes per collaborative step (one epoch)."""
    microbatch_size: int = 16
    """Samples per forward/backward pass on one peer."""
    optimizer: str = "lamb"
    lr: float = 0.00176
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    clip_norm: float = 1.0
    """Global gradient norm limit; 0 disables clipping."""
    warmup_steps: int = 50
    total_steps: int = 10000
    precision: str = "auto"
    average_state_every: int = 5
    """Epochs between averaging of parameters and optimizer state."""
    delay_parameter_updates: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.in_range("target_batch_size", 1)
        check.in_range("microbatch_size", 1)
        if self.microbatch_size > self.target_batch_size:
            check.fail(
                "microbatch_size",
                f"must be at most training.target_batch_size ({self.target_batch_size}), "
                f"got {self.microbatch_size}",
            )
        check.one_of("optimizer", OPTIMIZERS)
        check.in_range("lr", 0.0, low_open=True)
        check.in_range("weight_decay", 0.0)
        for i, beta in enumerate(self.betas):
            if not 0.0 <= beta < 1.0:
                check.fail(f"betas[{i}]", f"must be in [0.0, 1.0), got {beta}")
        check.in_range("eps", 0.0, low_open=True)
        check.in_range("clip_norm", 0.0)
        check.in_range("warmup_steps", 0)
        check.in_range("total_steps", 1)
        if self.total_steps <= self.warmup_steps:
            check.fail(
                "total_steps",
                f"must be greater than training.warmup_steps ({self.warmup_steps}), "
                f"got {self.total_steps}",
            )
        check.one_of("precision", PRECISIONS)
        check.in_range("average_state_every", 1)
        check.in_range("seed", 0, 2**63, high_open=True)


@dataclass(frozen=True)
class AveragingSection:
    KEY: ClassVar[str] = "averaging"
    codec: str = "fp16"
    target_group_size: int = 16
    min_group_size: int = 2
    matchmaking_time: float = 5.0
    """Seconds a leader waits for a group to form."""
    allreduce_timeout: float = 60.0
    moshpit: bool = False

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.one_of("codec", CODECS)
        check.in_range("target_group_size", 1)
        check.in_range("min_group_size", 1)
        if self.min_group_size > self.target_group_size:
            check.fail(
                "min_group_size",
                f"must be at most averaging.target_group_size ({self.target_group_size}), "
                f"got {self.min_group_size}",
            )
        check.in_range("matchmaking_time", 0.0, low_open=True)
        check.in_range("allreduce_timeout", 0.0, low_open=True)


@dataclass(frozen=True)
class NetworkSection:
    KEY: ClassVar[str] = "network"
    initial_peers: tuple[str, ...] = ()
    """Multiaddrs (``/ip4/.../tcp/.../p2p/...``) or ``peer@host:port``; parsed by the net layer."""
    coordinator_url: str = ""
    checkpoint_url: str = ""
    """The http(s):// URL of the folder where the organizer serves the backbone's latest
    checkpoint (``<url>/index.json``, signed by ``access.project_key``; see
    ``core.training.published``); a peer that finds no other peer may start from it. Empty: none."""
    peer_port: int = PEER_PORT
    """The TCP port volunteers' peers listen on (``core.net.ports``); 0: any free port."""
    aux_port: int = AUX_PORT
    """The TCP port auxiliary peers listen on: the one organizers open in the backbone's firewall."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.in_range("peer_port", 0, 65535)
        check.in_range("aux_port", 0, 65535)
        for i, peer in enumerate(self.initial_peers):
            if not (peer.startswith("/") or "@" in peer):
                check.fail(
                    f"initial_peers[{i}]",
                    f"must be a multiaddr starting with '/' or an address with '@', got {peer!r}",
                )
        for name in ("coordinator_url", "checkpoint_url"):
            url = getattr(self, name)
            if url and not url.startswith(("http://", "https://")):
                check.fail(name, f"must be empty or an http(s):// URL, got {url!r}")


@dataclass(frozen=True)
class AccessSection:
    KEY: ClassVar[str] = "access"
    mode: str = "open"
    """``open``: anyone may join. ``moderated``: every peer shows a pass from the coordinator."""
    project_key: str = ""
    """The PeerID of the project's public key, which signs access passes (moderated projects)."""
    allow_signup: bool = False
    """Whether anyone may create an account at the coordinator, or only moderators."""
    pass_lifetime: float = 900.0
    """Seconds a pass stays valid; peers renew theirs at half its life."""
    refresh_interval: float = 60.0
    """Seconds between peers' checks with the coordinator: a ban reaches every peer within this."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.one_of("mode", ACCESS_MODES)
        if self.project_key:
            try:
                PeerID.from_string(self.project_key)
            except PeerIdError as exc:
                check.fail("project_key", f"must be the PeerID of an Ed25519 key: {exc}")
        elif self.mode == "moderated":
            check.fail("project_key", "a moderated project needs the project's public key")
        check.in_range("pass_lifetime", 10.0)
        check.in_range("refresh_interval", 0.0, low_open=True)
        if self.refresh_interval > self.pass_lifetime / 2:
            check.fail(
                "refresh_interval",
                f"must be at most half of access.pass_lifetime ({self.pass_lifetime / 2:g}), "
                f"got {self.refresh_interval:g}",
            )

    @property
    def moderated(self) -> bool:
        return self.mode == "moderated"

    @property
    def key(self) -> PeerID | None:
        return PeerID.from_string(self.project_key) if self.project_key else None
