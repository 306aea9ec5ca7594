"""The control API's schema, version 1: what the engine says about itself and what it accepts.

Plain frozen dataclasses, encoded as JSON by ``core.api.codec``. Adding an optional field is
compatible; renaming or removing one, or changing what a field means, needs ``API_VERSION`` + 1
(every response carries the version, and the client refuses an engine that speaks another).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Literal

from core.api.codec import Fallback
from core.api.errors import BadRequest
from core.api.project_url import PEER_ID_TEXT, ProjectUrl, is_project_url
from core.policy import UNKNOWN_CODE, ReasonCode, StateName

API_VERSION = 1
VERSION_HEADER = "X-Barnraise-Api"
"""The header carrying the API version of every request."""

Code = Annotated[ReasonCode, Fallback(UNKNOWN_CODE)]
"""A reason code (``core.policy.codes``, with ``StateName``). A code added by a newer engine reaches
an older client as ``"unknown"``, with the engine's reason in words beside it."""

SettingValue = bool | int | float | str


@dataclass(frozen=True)
class Amounts:
    """Contribution amounts (the ledger's columns)."""

    samples: int = 0
    compute_seconds: float = 0.0
    epochs: int = 0
    rounds: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0


@dataclass(frozen=True)
class DayAmounts:
    day: str
    """Local date, YYYY-MM-DD."""
    amounts: Amounts


@dataclass(frozen=True)
class Statistics:
    project: str | None
    """None: all projects together."""
    totals: Amounts
    today: Amounts
    month_bytes: int
    """Bytes sent and received this calendar month (what the network cap counts)."""
    days: list[DayAmounts] = field(default_factory=list)
    """The last N days, oldest first, days without work included."""


@dataclass(frozen=True)
class Progress:
    """How training goes right now (zeros and None before the first microbatch)."""

    epoch: int | None = None
    collaboration_epoch: int | None = None
    samples_per_second: float = 0.0
    collaboration_samples_per_second: float = 0.0
    peers: int = 0
    """Trainers of the collaboration we hear from (paused ones included), us included."""
    session_samples: int = 0
    """Samples this engine processed since it started."""


@dataclass(frozen=True)
class ProjectInfo:
    name: str
    description: str
    manifest: str
    """The engine's copy of the manifest."""
    initial_peers: list[str] = field(default_factory=list)
    data_base: str | None = None
    device: str = "cpu"
    active: bool = False
    """The project this engine trains for (one at a time)."""
    local_swarm: bool = False
    """Joined through a ``barnraise swarm`` running on this computer (see ``AttachRequest``)."""
    source_url: str | None = None
    """The project URL it was joined by (``https://coord.example.org``); None: from a file."""
    project_key: str | None = None
    """The PeerID of the project key its manifest is signed by, pinned when it was joined by URL:
    updates signed by any other key are refused."""
    manifest_version: int | None = None
    """The version of the signed manifest the engine holds (joined by URL only)."""
    update_refused: str | None = None
    """Why the latest signed update of the manifest was refused (it would break training, it is
    signed by another key, ...), in plain words; None when the latest was applied or none came."""


@dataclass(frozen=True)
class Network:
    """How other peers reach this computer: the reachability check's verdict, and how we are
    connected to the peers we talk to now (each peer counted once, by its best connection)."""

    reachability: Annotated[Literal["public", "private", "unknown"], Fallback("unknown")] = (
        "unknown"
    )
    """``public``: peers on the internet can connect to us; ``private``: they cannot (a router or a
    firewall in the way); ``unknown``: not checked yet."""
    public_address: str | None = None
    """Where others reach us (``public`` only)."""
    checked_at: float | None = None
    """Unix time of the last check."""
    peers: int = 0
    direct: int = 0
    punched: int = 0
    """Direct connections that hole punching opened through our router."""
    relayed: int = 0


@dataclass(frozen=True)
class Rounds:
    """How the active project trains (its manifest's ``training.mode``) and, in a mode whose
    rounds end on the shared clock (``ModeSpec.clock_rounds``: ``diloco``), where its rounds
    stand: each peer trains alone and the peers exchange what changed once a round, rounds ending
    when Unix time is a multiple of ``round_seconds``."""

    mode: str = "dedloc"
    """A name from the table of training modes (``core.api.modes``); one this side does not
    know (a newer engine's) is shown without a round line."""
    round_seconds: float | None = None
    """Clock rounds: a round's length (``training.round_seconds``)."""
    round_elapsed: float | None = None
    """Clock rounds: seconds into the current round when the state was read."""
    last_exchange_bytes: int | None = None
    """Clock rounds: the chunk bytes this peer sent in its last exchange; None before its first."""
    work_late: int | None = None
    """Clock rounds: how many rounds late this computer's work landed in its last landed round
    (0: in the round it was computed; a round it missed, or reached late, carries its work to a
    later one); None before its first."""


DEVICE_SETTING = re.compile(r"auto|cpu|mps|cuda(:\d{1,3})?")
"""A project's device: "auto" (the engine picks the best this computer has), or one by name."""


@dataclass(frozen=True)
class TrainingDevice:
    """The device the engine trains on (or would, once it runs), and why.

    Found without loading torch or CUDA: the NVIDIA driver, Apple silicon, the installed torch's
    build. Training makes the same choice with torch itself when it starts."""

    kind: Annotated[Literal["cuda", "mps", "cpu"], Fallback("cpu")]
    name: str
    """For people: "NVIDIA GeForce RTX 4070 (12 GB)", "Apple silicon GPU", "CPU (8 threads)"."""
    reason: str
    """Why this device, in plain words."""
    setting: str = "auto"
    """The active project's device setting ("auto" without a project)."""
    driver: str | None = None
    """The NVIDIA driver's version, when there is one."""
    cuda: str | None = None
    """The newest CUDA version that driver supports."""
    torch: str | None = None
    """The installed torch build ("2.13.0+cu130"); None when torch is not installed."""


@dataclass(frozen=True)
class EngineState:
    api_version: int
    engine_version: str
    pid: int
    state: StateName
    code: Code
    """The machine-readable reason (e.g. ``user_active``, ``on_battery``, ``peer_failed``)."""
    reason: str
    """The same in plain words, for the user."""
    since: float
    """Unix time of the last change of state."""
    contribute: bool
    """The user opted in."""
    user_paused: bool
    snoozed_until: float | None
    project: ProjectInfo | None
    progress: Progress
    threads: int
    duty: float
    notes: list[str] = field(default_factory=list)
    """What the sensors cannot tell, and why."""
    last_error: str | None = None
    network: Network | None = None
    """How other peers reach us, while the project's peer runs."""
    device: TrainingDevice | None = None
    """What the active project trains on, and why; None until the engine has looked."""
    rounds: Rounds | None = None
    """How the active project trains, once its peer has read the manifest; None before, and for
    a dmoe project."""


@dataclass(frozen=True)
class SettingInfo:
    name: str
    help: str
    default: SettingValue


@dataclass(frozen=True)
class Settings:
    values: dict[str, SettingValue]
    descriptions: list[SettingInfo] = field(default_factory=list)


@dataclass(frozen=True)
class SettingsUpdate:
    values: dict[str, SettingValue]


@dataclass(frozen=True)
class SnoozeRequest:
    minutes: float

    def __post_init__(self) -> None:
        if not 0 < self.minutes <= 7 * 24 * 60:
            raise BadRequest("minutes must be more than 0 and at most a week (10080)")


@dataclass(frozen=True)
class AttachRequest:
    manifest: str
    """A path on the engine's machine to the project's TOML manifest, or a project URL
    (``https://coord.example.org``, optionally with ``#key=<PeerID>``): the engine fetches the
    manifest its coordinator serves signed, checks the signature and keeps a copy."""
    initial_peers: list[str] = field(default_factory=list)
    """Peers to join instead of the manifest's."""
    data_base: str | None = None
    """Where the manifest's relative data URLs point (a local shard server, say)."""
    device: str = "auto"
    """auto (the best this computer has: CUDA, else Apple's MPS, else the CPU), cpu, cuda,
    cuda:N or mps."""
    local_swarm: bool = False
    """Joined through a ``barnraise swarm`` on this computer: its addresses change every run, so
    the engine reads them afresh from the running swarm each time the peer starts."""
    pinned_key: str | None = None
    """With a project URL: the project key (PeerID) the user accepted in the preview; the attach
    is refused if the manifest fetched now is signed by another key."""

    def __post_init__(self) -> None:
        if not DEVICE_SETTING.fullmatch(self.device):
            raise BadRequest(f"unknown device {self.device!r}: use auto, cpu, cuda, cuda:N or mps")
        if self.pinned_key is not None and not PEER_ID_TEXT.fullmatch(self.pinned_key):
            raise BadRequest(f"pinned_key {self.pinned_key[:80]!r} is not a PeerID")
        if self.is_url:
            ProjectUrl.parse(self.manifest)  # BadRequest saying what is wrong with it
            if self.local_swarm:
                raise BadRequest("a project URL is not a local demo swarm: drop local_swarm")
        elif self.pinned_key is not None:
            raise BadRequest("pinned_key goes with a project URL, not a manifest file")

    @property
    def is_url(self) -> bool:
        """Whether ``manifest`` is a project URL rather than a path."""
        return is_project_url(self.manifest)


@dataclass(frozen=True)
class PreviewRequest:
    url: str
    """A project URL, ``https://host[:port]``, optionally with ``#key=<PeerID>``."""

    def __post_init__(self) -> None:
        ProjectUrl.parse(self.url)  # BadRequest saying what is wrong with it


@dataclass(frozen=True)
class ResourceUse:
    """What contributing to a project would use on this computer, estimated before joining.

    Rough by nature: the model's size comes from the manifest, the rest from how the project
    trains; ``notes`` says what the figures leave out."""

    device: str
    """What this computer would train on, for people: "NVIDIA GeForce RTX 4070 (12 GB)",
    "CPU (8 threads)" (the engine's device choice, ``TrainingDevice.name``)."""
    parameters: int
    """The model's parameters (a dmoe project: the experts this computer would host)."""
    disk_bytes: int
    """Checkpoints kept and the data cache, estimated."""
    network_bytes_per_hour: int
    """Traffic while contributing, sent and received together, estimated (see the engine's
    ``core.engine.join.resource_use`` for how)."""
    notes: list[str] = field(default_factory=list)


ProjectKind = Literal["collaborative", "dmoe"]
KeySource = Literal["url", "first-use", "pinned"]
"""How the project key of a preview is trusted: ``url``: the URL's ``#key=`` names it;
``first-use``: nothing names it yet, joining pins it; ``pinned``: a project already attached by
this URL pinned it."""


@dataclass(frozen=True)
class ProjectPreview:
    """What a project URL serves, checked, before anything is attached: shown to the user, who
    then attaches it (with ``AttachRequest.pinned_key = project_key``) and logs in or signs up."""

    url: str
    """The project URL, normalised, without the ``#key=`` fragment."""
    name: str
    description: str
    kind: ProjectKind
    mode: Literal["open", "moderated"]
    """``moderated``: contributing needs an account at the project's coordinator."""
    allow_signup: bool
    """Volunteers may create their own account (else an organizer invites them)."""
    project_key: str
    """The PeerID of the key the manifest is signed by."""
    key_source: KeySource
    coordinator_url: str
    """The coordinator named in the manifest (empty: none)."""
    version: int
    """The signed manifest's version (it increases with every change its organizer makes)."""
    uses: ResourceUse


@dataclass(frozen=True)
class ProjectList:
    projects: list[ProjectInfo]


# ---- accounts and the leaderboard (the active project's coordinator) -----------------------------


@dataclass(frozen=True)
class LoginRequest:
    username: str
    password: str = field(repr=False)
    signup: bool = False
    """Create the account first (where the project lets volunteers sign up)."""

    def __post_init__(self) -> None:
        if not self.username.strip():
            raise BadRequest("the username is empty")
        if not self.password:
            raise BadRequest("the password is empty")


@dataclass(frozen=True)
class AccountInfo:
    """Who this engine is logged in as at the active project's coordinator."""

    project: str | None
    coordinator: str | None
    """The coordinator's URL; None when the project has none (an open project without accounts)."""
    username: str | None
    logged_in: bool
    pass_expires: float | None = None
    """Unix time the current access pass runs out (moderated projects, while the peer runs)."""
    error: str | None = None
    """The last problem with the account (keyring, coordinator, a ban), in plain words."""
    moderated: bool = False
    """The project admits only peers with a pass: contributing needs a login."""
    allow_signup: bool = False
    """The coordinator lets volunteers create their own account (else an organizer must)."""


@dataclass(frozen=True)
class LeaderboardEntry:
    rank: int
    username: str
    samples: int
    compute_seconds: float
    active_devices: int = 0
    """Peers of this user with a contribution in the last 15 minutes."""
    devices: int = 0
    last_seen: float | None = None
    expert_samples: int = 0
    """Of ``samples``, what this user's expert servers computed for others, credited by receipts."""


@dataclass(frozen=True)
class LeaderboardTotals:
    samples: int = 0
    compute_seconds: float = 0.0
    users: int = 0
    epochs: int = 0
    expert_samples: int = 0
    """Of ``samples``, what expert servers computed for other users, credited by receipts."""


@dataclass(frozen=True)
class Leaderboard:
    project: str
    time: float
    users: list[LeaderboardEntry]
    totals: LeaderboardTotals


@dataclass(frozen=True)
class HistoryDay:
    day: str
    """UTC date, YYYY-MM-DD."""
    samples: int = 0
    compute_seconds: float = 0.0


@dataclass(frozen=True)
class MyRank:
    project: str
    username: str
    rank: int | None
    """None until the user's first counted contribution."""
    percentile: float | None
    samples: int = 0
    compute_seconds: float = 0.0
    above: list[LeaderboardEntry] = field(default_factory=list)
    below: list[LeaderboardEntry] = field(default_factory=list)
    history_7d: list[HistoryDay] = field(default_factory=list)
    history_30d: list[HistoryDay] = field(default_factory=list)
    expert_samples: int = 0
    """Of ``samples``, what this user's expert servers computed for others, credited by receipts."""


@dataclass(frozen=True)
class CreditDifference:
    """One epoch on which this computer's count and the project's credit disagree."""

    epoch: int
    local: int
    """Samples this computer recorded in the epoch (0: it has no record of it)."""
    credited: int
    """Samples the project's coordinator credited to this computer's key in it (0: none)."""
    reason: str
    """Why, as far as can be told, in plain words."""


@dataclass(frozen=True)
class CreditCheck:
    """This computer's own count of its landed epochs beside what the active project's coordinator
    credited to its peer key, over the epochs this computer keeps a record of."""

    project: str
    peer: str
    """This computer's peer key (PeerID), the one the coordinator credits."""
    local_samples: int
    """This computer's samples over the compared epochs."""
    credited_samples: int
    """The coordinator's credit over the same epochs."""
    matches: bool
    differences: list[CreditDifference] = field(default_factory=list)
    """Oldest first."""
    summary: str = ""
    """The outcome in a sentence or two."""
    epochs: int = 0
    """How many epochs were compared."""
    since: int | None = None
    """The oldest epoch compared; None when this computer has no record to compare yet."""
    credited_total: int = 0
    """What the coordinator credited to this key over every epoch, older ones included."""


# ---- the collaboration's training curve, offers of projects, diagnostics --------------------------


@dataclass(frozen=True)
class EpochPoint:
    """One completed epoch of the whole collaboration, as this engine's peer saw it."""

    epoch: int
    time: float
    """Unix time the epoch was seen complete."""
    loss: float | None
    """The collaboration's mean loss (sum of losses over sum of mini-steps); None if unknown."""
    samples: int
    """Samples in the epoch, all peers together."""
    samples_per_second: float
    peers: int
    """Trainers alive at the end of the epoch."""


@dataclass(frozen=True)
class HeldOutPoint:
    """The project's backbone measured the model on held-out text (text no trainer reads), as this
    engine's peer saw it in the backbone's progress record."""

    epoch: int
    """The epoch of the model measured (the training loss of the same epoch is its twin)."""
    time: float
    """Unix time this engine's peer saw it."""
    loss: float | None
    """Mean cross-entropy per predicted token; None if it was not a finite number."""
    accuracy: float
    """Share of predicted tokens guessed right, 0 to 1."""
    samples: int
    """Sequences measured."""
    floor: float | None = None
    """The unigram floor on the same text: the loss of a model that only counts words (how often
    each token occurs). A loss below it means the model uses context. None where the backbone
    reported none (an older one, or one that could not read its training text)."""


@dataclass(frozen=True)
class TrainingHistory:
    project: str | None
    """None when no project is active (then ``points`` is empty)."""
    points: list[EpochPoint] = field(default_factory=list)
    """Oldest first; the engine keeps a bounded number of the most recent."""
    held_out: list[HeldOutPoint] = field(default_factory=list)
    """The backbone's held-out evaluations, oldest first (none where the project evaluates
    nothing); bounded like ``points``."""


OfferSource = Literal["local_swarm", "attached"]
"""local_swarm: a ``barnraise swarm`` running on this computer; attached: already attached here."""


@dataclass(frozen=True)
class ProjectOffer:
    """A project the user can pick on first run (or attach later)."""

    name: str
    description: str
    manifest: str
    """Path of the manifest on the engine's machine."""
    source: OfferSource
    initial_peers: list[str] = field(default_factory=list)
    data_base: str | None = None
    note: str = ""
    """One line for the user: where it runs, how many peers, whether it needs an account."""
    moderated: bool = False
    kind: ProjectKind | None = None
    """What its manifest declares; None where it cannot be read (or an older engine answered)."""


@dataclass(frozen=True)
class ProjectOffers:
    offers: list[ProjectOffer] = field(default_factory=list)


@dataclass(frozen=True)
class Diagnostics:
    """What a bug report needs from the engine (never a token, a password or a key)."""

    engine_version: str
    api_version: int
    pid: int
    platform: str
    python: str
    started: float
    """Unix time the engine started."""
    paths: dict[str, str] = field(default_factory=dict)
    """The engine's folders and files: config, data, cache, logs, settings file, ledger."""
    torch: str | None = None
    """torch's version once training loaded it, else None."""
    log_tail: list[str] = field(default_factory=list)
    """The last lines of the engine's log file."""
    network: list[str] = field(default_factory=list)
    """The reachability check's details (observed addresses, the peers' answers), one per line."""
    accelerator: list[str] = field(default_factory=list)
    """The device choice, the NVIDIA driver and each GPU as it is now, one per line."""


# ---- trying the model: a question to the active project's latest replica ---------------------------

QUESTION_LIMIT = 500
"""The most characters a question to the model may have (a few sentences: what fits the models'
``max_position`` tokens, which the engine checks too)."""
MASK = "[MASK]"
"""Where a masked model is to guess a word."""
MASK_SPELLINGS = re.compile(r"\[mask\]|_{3,}", re.IGNORECASE)
"""``[MASK]`` in any case, or three or more underscores (``___``, friendlier to type)."""
TRY_MODEL_TIMEOUT = 120.0
"""Seconds a client waits for an answer: a copy of the weights and a few forward passes on the CPU
(seconds for the demo, longer for a large model on a busy computer)."""


def question_problem(text: str) -> str | None:
    """What makes ``text`` no question for the model whatever its kind, or None."""
    if not text.strip():
        return "type a sentence for the model first"
    if len(text) > QUESTION_LIMIT:
        return f"the text is {len(text)} characters long; the model takes at most {QUESTION_LIMIT}"
    return None


def with_masks(text: str) -> str:
    """``text`` with every spelling of a missing word (``MASK_SPELLINGS``) written ``[MASK]``."""
    return MASK_SPELLINGS.sub(MASK, text)


def filled_in(text: str, words: list[str]) -> str:
    """``text`` with its missing words (any spelling), in order, replaced by ``words``; missing
    words beyond them stay as typed."""
    given = iter(words)
    return MASK_SPELLINGS.sub(lambda match: next(given, match.group(0)), text)


@dataclass(frozen=True)
class TryModelRequest:
    text: str
    """A sentence with ``[MASK]`` (or ``___``) where a masked model is to guess the word; for a
    causal model, the start of a text to complete."""

    def __post_init__(self) -> None:
        problem = question_problem(self.text)
        if problem is not None:
            raise BadRequest(problem)


@dataclass(frozen=True)
class Guess:
    word: str
    """A word or a word piece (a piece that continues a word is shown without its ``##``)."""
    probability: float
    """Among the vocabulary's words (the special tokens left out), from 0 to 1."""


ModelAnswerCode = Literal[
    "answered", "no_project", "dmoe_project", "not_ready", "unloaded", "unknown"
]
"""``answered``; else why the model cannot answer: no project attached, a dmoe project (experts,
no single model), the model not here yet (the peer has not started, or still loads the
collaboration's state), the engine unloaded it (the peer stopped); ``unknown``: a code of a newer
engine."""


@dataclass(frozen=True)
class ModelAnswer:
    """The active project's model asked a question: its answer, or why it cannot answer now."""

    project: str | None
    code: Annotated[ModelAnswerCode, Fallback("unknown")]
    reason: str = ""
    """Why it cannot answer, in plain words (empty when it answered)."""
    kind: Annotated[Literal["masked", "causal", "unknown"], Fallback("unknown")] | None = None
    """``masked``: guesses for a missing word; ``causal``: the text completed; None unanswered."""
    guesses: list[Guess] = field(default_factory=list)
    """masked: the top guesses for the first missing word, best first."""
    text: str = ""
    """masked: the question with each missing word filled in by the best guess; causal: the
    question and its completion."""
    completion: str = ""
    """causal: what the model added."""
    epoch: int | None = None
    """The collaboration's epoch the answering copy of the model comes from."""
    copied_at: float | None = None
    """Unix time the weights were copied from the training peer (copies are reused a while)."""

    @property
    def answered(self) -> bool:
        return self.code == "answered"
