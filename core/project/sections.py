"""The sections of a project manifest, each a frozen dataclass that validates itself.

Field annotations are the schema (``validation.FieldCheck`` reads them) and defaults are what an
omitted key means. Model settings stay plain values here; the training layer builds its model
configuration from them, so that this package never imports torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from core.codecs import TOPK_BITS, TOPK_DENSITY, Codec, active_codecs
from core.config.ports import BACKBONE_PORT, PEER_PORT
from core.modes import RESIDUAL_DECAY, WORK_CHECKS, active_modes
from core.project.validation import FieldCheck
from core.trust.errors import PeerIdError
from core.trust.peer_id import PeerID

PROJECT_NAME = re.compile(r"[a-z0-9-]{1,64}")
DEFAULT_KIND = "collaborative"
PROJECT_KINDS = (DEFAULT_KIND, "dmoe")
"""``collaborative``: DeDLOC's data-parallel training of one model (ALBERT), the ``Manifest``.
``dmoe``: a decentralized mixture-of-experts (Learning@home), the ``DmoeManifest``."""
ALBERT_MLM = "albert-mlm"
LLAMA_CLM = "llama-clm"
MODEL_KINDS = (ALBERT_MLM, LLAMA_CLM)
"""``albert-mlm``: an ALBERT masked language model (``core.models.albert``). ``llama-clm``: a
decoder-only causal language model of the Llama family's shape (``core.models.llama``)."""
DATA_FORMATS = ("auto", "jsonl", "parquet", "text")
OPTIMIZERS = ("lamb", "adam", "adamw", "sgd")
OPTIMIZER_STATES = ("32bit", "8bit")
MOMENT_OPTIMIZERS = ("lamb", "adamw")
"""The optimizers that can keep 8-bit states and be offloaded (``core.optim.moments``)."""
PRECISIONS = ("auto", "fp32", "fp16", "bf16")
AGGREGATIONS = ("mean", "centered_clip")
MAX_ROUND_SECONDS = 86400.0
URL_SCHEMES = ("file", "http", "https")
ACCESS_MODES = ("open", "moderated")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")

# Upper bounds: far above any project these peers can train, low enough that no value can make a
# peer allocate, wait or loop without end. Each field's docstring says its range.
MAX_TEXT = 4096
"""Characters in a description, a path, a URL or an address."""
MAX_BACKBONE_KEYS = 16
"""Backbones a manifest may name (``access.backbone_keys``)."""
MAX_WIDTH = 65536
"""Embedding, hidden and attention widths."""
MAX_VOCAB = 2**20
MAX_POSITIONS = 2**20
"""Tokens per sample (``model.max_position``, ``data.seq_len``)."""
MAX_LAYERS = 1024
MAX_ROPE_THETA = 1e9
"""Above every rotary base in use (Llama 3's is 500,000)."""
MAX_SOURCES = 1024
"""``[[data.sources]]`` tables, and URLs in one of them (``MAX_URLS``)."""
MAX_URLS = 100_000
MAX_SHUFFLE_BUFFER = 2**22
MAX_TARGET_BATCH = 2**24
"""Samples in one collaborative step."""
MAX_MICROBATCH = 2**16
MAX_STEPS = 10**9
MAX_GROUP = 1024
"""Peers in one averaging group."""
MAX_WAIT = 3600.0
"""Seconds for matchmaking or one all-reduce."""
MAX_PEERS_LISTED = 256
"""``network.initial_peers``."""
MAX_PASS_LIFETIME = 30 * 24 * 3600.0


@dataclass(frozen=True)
class ProjectSection:
    KEY: ClassVar[str] = "project"
    name: str
    """Names the swarm: peers of one project find each other under it."""
    kind: str = DEFAULT_KIND
    """What the swarm does, which decides the manifest's other sections: ``collaborative``
    (DeDLOC training of one model, the default) or ``dmoe`` (volunteers host experts)."""
    description: str = ""
    """At most 4096 characters."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.matches("name", PROJECT_NAME, "1 to 64 lowercase letters, digits or '-'")
        check.one_of("kind", PROJECT_KINDS)
        check.at_most("description", MAX_TEXT)


@dataclass(frozen=True)
class ModelSection:
    KEY: ClassVar[str] = "model"
    kind: str = ALBERT_MLM
    """``albert-mlm`` (an ALBERT masked language model) or ``llama-clm`` (a decoder-only causal
    language model of the Llama family's shape, which predicts the next token)."""
    vocab_size: int = 4096
    """1 to 2**20."""
    embedding_size: int = 64
    """1 to 65536, as ``hidden_size`` and ``intermediate_size``. ``albert-mlm``: the width of the
    factorized embeddings, projected up to ``hidden_size``. ``llama-clm`` embeds tokens at
    ``hidden_size`` and has no such width: leave the key out or set it to ``hidden_size``; any
    other value is an error."""
    hidden_size: int = 128
    num_layers: int = 4
    """1 to 1024, as ``num_heads``. ``albert-mlm``: applications of its one shared layer;
    ``llama-clm``: layers, each with its own weights."""
    num_heads: int = 4
    """Attention (query) heads; ``hidden_size`` must divide by it (``llama-clm``: into an even
    head width, for the rotary embeddings)."""
    num_kv_heads: int = 0
    """``llama-clm`` only: key/value heads, shared by groups of query heads (grouped-query
    attention), 0 to 1024 and dividing ``num_heads``; 0 means ``num_heads`` (one per head)."""
    intermediate_size: int = 256
    """The feed-forward block's width (``llama-clm``: of each of its gate and up projections)."""
    max_position: int = 128
    """1 to 2**20: the longest sequence (``albert-mlm``: rows of its position table)."""
    rope_theta: float = 10000.0
    """``llama-clm`` only: the rotary position embeddings' base, above 0 and at most 10**9."""
    tie_embeddings: bool = True
    """Whether the read-out over the vocabulary reuses the token embedding's matrix: fewer
    parameters. ``albert-mlm`` always ties (false is an error); ``llama-clm`` may untie."""
    dropout: float = 0.0
    """In [0, 1). ``albert-mlm`` only (``llama-clm`` has no dropout: a value other than 0 is an
    error)."""
    gradient_checkpointing: bool = False
    """Recompute the layers' activations in the backward pass instead of keeping them: far less
    memory per sample for about a third more compute (for large models on small GPUs); the loss
    and gradients are the same as without it."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.one_of("kind", MODEL_KINDS)
        for name, most in (
            ("vocab_size", MAX_VOCAB),
            ("embedding_size", MAX_WIDTH),
            ("hidden_size", MAX_WIDTH),
            ("num_layers", MAX_LAYERS),
            ("num_heads", MAX_LAYERS),
            ("intermediate_size", MAX_WIDTH),
            ("max_position", MAX_POSITIONS),
        ):
            check.in_range(name, 1, most)
        check.in_range("num_kv_heads", 0, MAX_LAYERS)
        check.in_range("rope_theta", 0.0, MAX_ROPE_THETA, low_open=True)
        check.in_range("dropout", 0.0, 1.0, high_open=True)
        if self.hidden_size % self.num_heads:
            check.fail(
                "hidden_size",
                f"must be divisible by model.num_heads ({self.num_heads}), got {self.hidden_size}",
            )
        if self.kind == LLAMA_CLM:
            self._check_llama(check)
        else:
            self._check_albert(check)

    @property
    def kv_heads(self) -> int:
        """The key/value heads a ``llama-clm`` has (``num_kv_heads``, 0 meaning ``num_heads``)."""
        return self.num_kv_heads or self.num_heads

    def _check_llama(self, check: FieldCheck) -> None:
        head = self.hidden_size // self.num_heads
        if head % 2:
            check.fail(
                "num_heads",
                f"must leave an even head width for kind {LLAMA_CLM!r} (rotary embeddings turn "
                f"pairs of values): hidden_size {self.hidden_size} / {self.num_heads} = {head}",
            )
        if self.num_heads % self.kv_heads:
            check.fail(
                "num_kv_heads",
                f"must divide model.num_heads ({self.num_heads}), got {self.num_kv_heads}",
            )
        if self.embedding_size not in (ModelSection.embedding_size, self.hidden_size):
            check.fail(
                "embedding_size",
                f"applies to kind {ALBERT_MLM!r} only: a {LLAMA_CLM!r} embeds at hidden_size "
                f"({self.hidden_size}); leave it out or set it to hidden_size, "
                f"got {self.embedding_size}",
            )
        if self.dropout != ModelSection.dropout:
            check.fail("dropout", f"kind {LLAMA_CLM!r} has no dropout: leave it out or set 0.0")

    def _check_albert(self, check: FieldCheck) -> None:
        # settings an ALBERT would accept and ignore are refused: peers would believe them in force
        for name in ("num_kv_heads", "rope_theta", "tie_embeddings"):
            if getattr(self, name) != getattr(ModelSection, name):
                check.fail(
                    name,
                    f"applies to kind {LLAMA_CLM!r} only (kind is {self.kind!r}); leave it out"
                    + (" (an ALBERT always ties its decoder)" if name == "tie_embeddings" else ""),
                )


@dataclass(frozen=True)
class SourceSection:
    """One ``[[data.sources]]`` table: shards read in turn, drawn from in proportion to ``weight``."""

    KEY: ClassVar[str] = "data.sources"
    urls: tuple[str, ...]
    """Relative paths (to the manifest, or to where the swarm serves shards), absolute paths,
    file://, http:// or https:// URLs: 1 to 100,000 of them, each at most 4096 characters."""
    weight: float = 1.0
    """Above 0, at most 10**6."""
    format: str = "auto"
    text_field: str = "text"
    """At most 4096 characters."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.not_empty("urls")
        check_urls(check, self.urls)
        check.in_range("weight", 0.0, 1e6, low_open=True)
        check.one_of("format", DATA_FORMATS)
        check.not_empty("text_field")
        check.at_most("text_field", MAX_TEXT)


def check_urls(check: FieldCheck, urls: tuple[str, ...]) -> None:
    """The ``urls`` of a section that reads shards: at most 100,000, each a path or a URL of a
    scheme the readers know, none empty or longer than 4096 characters."""
    check.at_most("urls", MAX_URLS)
    for i, url in enumerate(urls):
        if not url.strip():
            check.fail(f"urls[{i}]", "must not be empty")
        if len(url) > MAX_TEXT:
            check.fail(f"urls[{i}]", f"must have at most {MAX_TEXT} characters")
        scheme = _SCHEME.match(url)
        if scheme and scheme.group(1).lower() not in URL_SCHEMES:
            check.fail(
                f"urls[{i}]",
                f"unsupported scheme {scheme.group(1)!r}; use a path, file://, http:// "
                f"or https://, got {url!r}",
            )


@dataclass(frozen=True)
class DataSection:
    KEY: ClassVar[str] = "data"
    seq_len: int = 128
    """Tokens per sample; at most ``model.max_position``."""
    shuffle_buffer: int = 10000
    """Samples held for shuffling, 0 to 2**22; 0 keeps the order of the files."""
    mask_prob: float = 0.15
    """In (0, 1): the share of tokens a masked model (``albert-mlm``) must predict. A causal
    model (``llama-clm``) predicts every next token: any value but 0.15 is an error there."""
    tokenizer: str = "tokenizer.json"
    """Path (relative to the manifest) or URL, at most 4096 characters; training creates it from
    the data if missing."""
    tokenizer_vocab_size: int = 4096
    """Must equal ``model.vocab_size``."""
    sources: tuple[SourceSection, ...] = ()
    """1 to 1024 ``[[data.sources]]`` tables."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.in_range("seq_len", 1, MAX_POSITIONS)
        check.in_range("shuffle_buffer", 0, MAX_SHUFFLE_BUFFER)
        check.in_range("mask_prob", 0.0, 1.0, low_open=True, high_open=True)
        check.not_empty("tokenizer")
        check.at_most("tokenizer", MAX_TEXT)
        check.in_range("tokenizer_vocab_size", 1, MAX_VOCAB)
        if not self.sources:
            check.fail("sources", "at least one [[data.sources]] table is required")
        check.at_most("sources", MAX_SOURCES)


@dataclass(frozen=True)
class TrainingSection:
    KEY: ClassVar[str] = "training"
    target_batch_size: int = 4096
    """Samples the whole swarm processes per collaborative step (one epoch), 1 to 2**24."""
    microbatch_size: int = 16
    """Samples per forward/backward pass on one peer, 1 to 2**16 (and the target batch)."""
    optimizer: str = "lamb"
    lr: float = 0.00176
    """Above 0, at most 10."""
    weight_decay: float = 0.01
    """0 to 10."""
    betas: tuple[float, float] = (0.9, 0.999)
    """Each in [0, 1)."""
    eps: float = 1e-6
    """Above 0, at most 1."""
    clip_norm: float = 1.0
    """Global gradient norm limit, 0 to 10**6; 0 disables clipping."""
    warmup_steps: int = 50
    """0 to 10**9, fewer than ``total_steps``."""
    total_steps: int = 10000
    """1 to 10**9."""
    precision: str = "auto"
    average_state_every: int = 5
    """Epochs between averaging of parameters and optimizer state, 1 to 10**9."""
    delay_parameter_updates: bool = False
    work_checks: float = WORK_CHECKS
    """The share of each trainer's epochs (dedloc: recomputing sampled microbatches) or rounds
    (diloco: replaying the whole round) whose work the backbone checks at random, in [0, 1],
    within 5 % of the backbone's time (1: every one, whatever it costs). A newcomer's credit
    waits until a check of it passes; a trainer caught faking work is accused and credited
    nothing more. In diloco every round then starts at the anchor with fresh inner moments,
    which costs some convergence (``docs/design/robust.md``). 0 checks nothing (dedloc credits
    claims as made, diloco scores the rounds' updates). Checks need a deterministic forward
    pass: refused with ``model.dropout`` above 0."""
    seed: int = 0
    """0 to 2**63 - 1."""
    optimizer_states: str = "32bit"
    """``32bit``, or ``8bit``: blockwise-quantised Adam moments, about 2 bytes per parameter
    instead of 8 (``lamb`` and ``adamw`` only). Every peer must use the same (snapshots differ)."""
    offload_optimizer: bool = False
    """Keep the optimizer's statistics and gradient accumulators in host memory and update each
    parameter there, one at a time (``lamb`` and ``adamw`` only): frees GPU memory."""
    mode: str = "dedloc"
    """A name from the table of training modes (``core.modes``: ``dedloc``, ``diloco``). In
    ``diloco`` mode every microbatch is an
    inner step of the optimizer above, and ``target_batch_size``, ``average_state_every`` and
    ``delay_parameter_updates`` do not apply (the last is refused: rounds overlap by ``overlap``)."""
    round_seconds: float = 60.0
    """diloco: the length of a round on the shared clock, 1 to 86400 s. Pick it so that one round
    computes the inner samples wanted on the slowest device that should count, and so that the
    exchange (``docs/organizers/modes.md``) takes less than a round."""
    inner_lr: float = 0.0
    """diloco: the inner steps' learning rate, 0 to 10. 0 (the default): ``lr`` scaled from the
    ``target_batch_size`` it was chosen for to one microbatch by the square-root rule,
    ``lr * sqrt(microbatch_size / target_batch_size)`` (the demo: 0.01 becomes 0.0025); ``lr``
    itself on every microbatch leaves the model at the unigram floor."""
    outer_lr: float = 0.7
    """diloco: the outer Nesterov step's learning rate, above 0 and at most 10 (DiLoCo's 0.7)."""
    outer_momentum: float = 0.9
    """diloco: the outer step's Nesterov momentum, in [0, 1) (DiLoCo's 0.9); 0 with codec
    ``topk``, whose error-feedback residual carries the momentum (then ``outer_lr`` 1.0 does
    best)."""
    overlap: bool = True
    """diloco: the exchange of a round runs while the next round computes, and its outer step
    lands mid-way through that round, on top of the work done meanwhile; false waits for it at
    each round's end. With ``work_checks`` every round starts at the anchor either way."""
    residual_decay: float = RESIDUAL_DECAY
    """diloco with a sparse codec (``topk``): the share of its error-feedback residual a peer
    keeps at each round's end before adding the round's work, in (0, 1] (SparseLoCo's 0.95). The
    residual stands in for the outer momentum there, and the decay lets old leftovers fade. With
    an exact codec the residual holds only work that has not landed yet, which is never decayed:
    another value is refused there."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.in_range("target_batch_size", 1, MAX_TARGET_BATCH)
        check.in_range("microbatch_size", 1, MAX_MICROBATCH)
        if self.microbatch_size > self.target_batch_size:
            check.fail(
                "microbatch_size",
                f"must be at most training.target_batch_size ({self.target_batch_size}), "
                f"got {self.microbatch_size}",
            )
        check.one_of("optimizer", OPTIMIZERS)
        check.in_range("lr", 0.0, 10.0, low_open=True)
        check.in_range("weight_decay", 0.0, 10.0)
        for i, beta in enumerate(self.betas):
            if not 0.0 <= beta < 1.0:
                check.fail(f"betas[{i}]", f"must be in [0.0, 1.0), got {beta}")
        check.in_range("eps", 0.0, 1.0, low_open=True)
        check.in_range("clip_norm", 0.0, 1e6)
        check.in_range("warmup_steps", 0, MAX_STEPS)
        check.in_range("total_steps", 1, MAX_STEPS)
        if self.total_steps <= self.warmup_steps:
            check.fail(
                "total_steps",
                f"must be greater than training.warmup_steps ({self.warmup_steps}), "
                f"got {self.total_steps}",
            )
        check.one_of("precision", PRECISIONS)
        check.in_range("average_state_every", 1, MAX_STEPS)
        check.in_range("work_checks", 0.0, 1.0)
        check.in_range("seed", 0, 2**63, high_open=True)
        check.one_of("optimizer_states", OPTIMIZER_STATES)
        for field, wanted in (
            ("optimizer_states", self.optimizer_states == "8bit"),
            ("offload_optimizer", self.offload_optimizer),
        ):
            if wanted and self.optimizer not in MOMENT_OPTIMIZERS:
                check.fail(
                    field,
                    f"needs training.optimizer {' or '.join(MOMENT_OPTIMIZERS)}, "
                    f"got {self.optimizer!r}",
                )
        check.one_of("mode", active_modes().names)
        check.in_range("round_seconds", 1.0, MAX_ROUND_SECONDS)
        check.in_range("inner_lr", 0.0, 10.0)
        check.in_range("outer_lr", 0.0, 10.0, low_open=True)
        check.in_range("outer_momentum", 0.0, 1.0, high_open=True)
        check.in_range("residual_decay", 0.0, 1.0, low_open=True)


@dataclass(frozen=True)
class AveragingSection:
    KEY: ClassVar[str] = "averaging"
    codec: str = "fp16"
    """A name from the codec table in force (``core.codecs``: none, fp16, uint8, blockwise8,
    auto, topk). ``topk`` sends the ``density`` largest values of each block of 4096 at ``bits``
    bits, and keeps what it did not send for the next round (error feedback)."""
    density: float = TOPK_DENSITY
    """A codec that takes settings (``topk``): the share of values sent, in (0, 1]."""
    bits: int = TOPK_BITS
    """A codec that takes settings (``topk``): bits per value sent, 2, 4 or 8."""
    target_group_size: int = 16
    """Peers in a group, 1 to 1024."""
    min_group_size: int = 2
    """1 to ``target_group_size``."""
    matchmaking_time: float = 5.0
    """Seconds a leader waits for a group to form: above 0, at most 3600."""
    allreduce_timeout: float = 60.0
    """Seconds, above 0 and at most 3600."""
    moshpit: bool = False
    """Many small groups instead of one: refused (true is an error) until training uses it;
    ``core.averaging.moshpit`` has the grid rounds."""
    aggregation: str = "centered_clip"
    """How each reducer combines its part: ``centered_clip`` (robust: a peer sending huge or wrong
    values pulls with a bounded force) or ``mean``. Both first leave out chunks with NaN or
    infinity and chunks whose norm is far above the group's (``norm_ratio_limit``). With honest
    peers CenteredClip returns the mean, so it is the default."""
    clip_tau: float = 1.0
    """CenteredClip's radius, as a multiple of the peers' median distance from the most central
    peer's data: above 0, at most 1000."""
    clip_iterations: int = 3
    """CenteredClip's iterations, 1 to 100."""
    norm_ratio_limit: float = 10.0
    """A chunk whose norm is more than this times the group's median is left out: above 1, at
    most 10**6."""
    weight_ratio_limit: float = 4.0
    """No peer's claimed samples count for more than this times the group's median claim in an
    average: at least 1, at most 10**6. A claim is the peer's own word; honest devices within
    this ratio of the median are averaged exactly as they claim."""
    verify_reducers: bool = False
    """Members check each other's reducers (signed commitments, seals, spot checks recomputed
    from the committed inputs: ``core.averaging.round.checks``). Off by default: it costs two
    SHA-256 passes over everything sent and received and a copy of what was sent, 2-3 % of a
    round on 100 Mbit/s links and 1.6x on loopback, where CPU is the bottleneck."""

    @property
    def sparse(self) -> bool:
        """The codec sends a few values of each block and keeps the rest for the next round."""
        return active_codecs().parse(self.codec).sparse

    def round_codec(self) -> Codec:
        """What rounds travel in: the codec of the table in force, at ``density`` and ``bits``
        where it takes settings (``topk``; its kernel loads numpy with the first chunk)."""
        codec = active_codecs().parse(self.codec)
        return codec if codec.tuning is None else codec.tuning.make(self.density, self.bits)

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.one_of("codec", active_codecs().names)
        check.in_range("density", 0.0, 1.0, low_open=True)
        if float(f"{self.density:g}") != self.density:
            check.fail("density", f"at most 6 significant digits, got {self.density!r}")
        tuning = active_codecs().parse(self.codec).tuning
        if tuning is None and (self.density, self.bits) != (TOPK_DENSITY, TOPK_BITS):
            field = "density" if self.density != TOPK_DENSITY else "bits"
            tuned = [c.name for c in active_codecs() if c.tuning is not None]
            check.fail(
                field,
                f"applies to {' or '.join(map(repr, tuned))} only (codec {self.codec!r} takes "
                "no settings)",
            )
        if tuning is not None and self.bits not in tuning.bits:
            check.fail(
                "bits", f"must be one of {', '.join(map(str, tuning.bits))}, got {self.bits}"
            )
        if self.moshpit:
            check.fail(
                "moshpit",
                "training does not use Moshpit groups yet: one group per round "
                "(target_group_size) is what runs; remove the key or set it false",
            )
        check.one_of("aggregation", AGGREGATIONS)
        check.in_range("clip_tau", 0.0, 1000.0, low_open=True)
        check.in_range("clip_iterations", 1, 100)
        check.in_range("norm_ratio_limit", 1.0, 1e6, low_open=True)
        check.in_range("weight_ratio_limit", 1.0, 1e6)
        check.in_range("target_group_size", 1, MAX_GROUP)
        check.in_range("min_group_size", 1, MAX_GROUP)
        if self.min_group_size > self.target_group_size:
            check.fail(
                "min_group_size",
                f"must be at most averaging.target_group_size ({self.target_group_size}), "
                f"got {self.min_group_size}",
            )
        check.in_range("matchmaking_time", 0.0, MAX_WAIT, low_open=True)
        check.in_range("allreduce_timeout", 0.0, MAX_WAIT, low_open=True)


@dataclass(frozen=True)
class NetworkSection:
    KEY: ClassVar[str] = "network"
    initial_peers: tuple[str, ...] = ()
    """Multiaddrs (``/ip4/.../tcp/.../p2p/...``) or ``peer@host:port``; parsed by the net layer.
    At most 256, each at most 4096 characters (as the URLs)."""
    coordinator_url: str = ""
    checkpoint_url: str = ""
    """The http(s):// URL of the folder where the organizer serves the backbone's latest
    checkpoint (``<url>/index.json``, signed by ``access.project_key``; see
    ``core.training.publish.checkpoint``); a peer that finds no other peer may start from it. Empty: none."""
    peer_port: int = PEER_PORT
    """The TCP port volunteers' peers listen on (``core.config.ports``); 0: any free port."""
    aux_port: int = BACKBONE_PORT
    """The TCP port the backbone listens on (the key keeps its first name, which existing manifests
    use): the one organizers open in its firewall."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.in_range("peer_port", 0, 65535)
        check.in_range("aux_port", 0, 65535)
        check.at_most("initial_peers", MAX_PEERS_LISTED)
        check.at_most("coordinator_url", MAX_TEXT)
        check.at_most("checkpoint_url", MAX_TEXT)
        for i, peer in enumerate(self.initial_peers):
            if len(peer) > MAX_TEXT:
                check.fail(f"initial_peers[{i}]", f"must have at most {MAX_TEXT} characters")
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
    """Seconds a pass stays valid, 10 to 30 days; peers renew theirs at half its life."""
    refresh_interval: float = 60.0
    """Seconds between peers' checks with the coordinator: a ban reaches every peer within this.
    Above 0, at most half of ``pass_lifetime``."""
    backbone_keys: tuple[str, ...] = ()
    """PeerIDs of the keys the project's backbones run with (``barnraise backbone --identity``):
    what they publish confirms the collaboration's epoch and state (``core.training.progress
    .confirmed``), as the project key's own would. Empty: only a backbone running with the project
    key confirms, and in a project without one nothing does (its epoch is what most records say)."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.one_of("mode", ACCESS_MODES)
        check.at_most("project_key", 128)  # a PeerID is about 50; decoding is quadratic
        if self.project_key:
            try:
                PeerID.from_string(self.project_key)
            except PeerIdError as exc:
                check.fail("project_key", f"must be the PeerID of an Ed25519 key: {exc}")
        elif self.mode == "moderated":
            check.fail("project_key", "a moderated project needs the project's public key")
        check.at_most("backbone_keys", MAX_BACKBONE_KEYS)
        for i, key in enumerate(self.backbone_keys):
            if len(key) > 128:
                check.fail(f"backbone_keys[{i}]", "must have at most 128 characters")
            try:
                PeerID.from_string(key)
            except PeerIdError as exc:
                check.fail(f"backbone_keys[{i}]", f"must be the PeerID of an Ed25519 key: {exc}")
        check.in_range("pass_lifetime", 10.0, MAX_PASS_LIFETIME)
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

    @property
    def confirmers(self) -> frozenset[str]:
        """The keys whose records confirm the collaboration's epoch and state: the project key
        and the backbones' keys (as PeerID strings; empty: none named)."""
        keys = {self.project_key} if self.project_key else set()
        return frozenset(keys | set(self.backbone_keys))
