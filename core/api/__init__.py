"""The contract between the engine and its clients (the desktop app, ``barnraise ctl``).

- ``schema``    versioned dataclasses: EngineState, Progress, Rounds (the active project's mode and its
  rounds), Statistics, Settings, ProjectInfo, ProjectPreview (a project URL's signed manifest,
  checked, and what joining would use), AccountInfo, Leaderboard, MyRank, CreditCheck (this
  computer's count of its epochs beside the coordinator's credit), ModelAnswer (the active project's
  model asked a question), requests; state names and reason codes (from ``core.policy``).
- ``events``    typed events of the websocket stream (state changed, progress, epoch, a held-out
  evaluation, peers, errors, account changed, network changed, a signed manifest update taken or
  refused).
- ``errors``    ApiError and its subclasses, with the codes and HTTP statuses they travel as, and
  the error id of the engine's own failures (``error_id``).
- ``codec``     dataclasses to JSON and back, checked against their type hints; unknown reason
  codes from a newer engine read as ``"unknown"``.
- ``settings``  settings_view: the preferences, with their descriptions, as the API's Settings.
- ``endpoint``  the engine's endpoint file (URL, token, pid) in the user's runtime directory.
- ``logs``      the app's log files (``app.log``, ``app-crash.log``) and the user's folders, with
  the helpers of ``core.util.process.logfiles`` and ``core.util.process.crashes``, named here for the app.
- ``login_item``  start at login (``core.util.process.login_item``), named here for the app.
- ``modes``     the table of training modes (``core.modes``), named here for the app.
- ``clock``     injectable time (``core.util.clock``: ``Clock``, ``SYSTEM_CLOCK``), named here for the
  app.
- ``project_url`` ProjectUrl: a project URL (``https://coord.example.org/#key=<PeerID>``) checked
  and normalised, the key its fragment pins, where its signed manifest is served.
- ``client``    EngineClient: the typed async client.
- ``protocol``  EngineApi: the calls as a Protocol (EngineClient and FakeEngine satisfy it).
- ``detached``  starting a child detached from the app (the engine, the demo swarm): the helper of
  ``core.util.process.detached``, named here for the app.
- ``program``  Barnraise as a program: ``VERSION``, the command lines that start the engine, the
  swarm or the app (``core.util.process.launch``), its data files (``core.util.process.resources``).
- ``torch_fetch``  a light bundle's first run, for the app: whether torch must be fetched, the
  command that fetches it, and the progress lines it prints (FetchProgress).
- ``testing``   (a subpackage, not exported here) FakeEngine: an in-memory engine with realistic
  data, deciding with the real policy, for GUI tests, screenshots and ``barnraise app --preview``.

This package imports neither Qt nor torch nor the engine (of ``core`` only ``config``, ``policy``,
``modes`` and ``util``): the GUI imports it and nothing else of ``core``, and both sides of the socket agree
through it. ``EngineClient`` is loaded on first use: it brings aiohttp (a third of a second), which
the app's window need not wait for.
"""

from typing import TYPE_CHECKING, Any

from core.api.endpoint import Endpoint, app_settings_path, endpoint_path, engine_output_path
from core.api.errors import (
    ApiError,
    BadRequest,
    Conflict,
    CoordinatorUnreachable,
    EngineBusy,
    EngineUnavailable,
    Forbidden,
    LoginRefused,
    LoginRequired,
    NotFound,
    StorageFailed,
    TooManyAttempts,
    Unauthorized,
    UnsupportedMediaType,
    VersionMismatch,
)
from core.api.events import (
    AccountChanged,
    CollaborationEpoch,
    EpochFinished,
    ErrorRaised,
    Event,
    HeldOutMeasured,
    ManifestUpdated,
    NetworkChanged,
    PeersSeen,
    ProgressUpdated,
    ProjectsChanged,
    RolledBack,
    StateChanged,
    UnknownEventType,
)
from core.api.project_url import ProjectUrl
from core.api.protocol import EngineApi
from core.policy import UNKNOWN_CODE, ReasonCode, StateName

if TYPE_CHECKING:
    from core.api.client import EngineClient
from core.api.schema import (
    API_VERSION,
    AccountInfo,
    Amounts,
    AttachRequest,
    CreditCheck,
    CreditDifference,
    DayAmounts,
    Diagnostics,
    EngineState,
    EpochPoint,
    Guess,
    HeldOutPoint,
    HistoryDay,
    Leaderboard,
    LeaderboardEntry,
    LeaderboardTotals,
    LoginRequest,
    ModelAnswer,
    MyRank,
    Network,
    PreviewRequest,
    Progress,
    ProjectInfo,
    ProjectList,
    ProjectOffer,
    ProjectOffers,
    ProjectPreview,
    ResourceUse,
    Rounds,
    SettingInfo,
    Settings,
    Statistics,
    TrainingHistory,
    TryModelRequest,
)

__all__ = [
    "API_VERSION",
    "UNKNOWN_CODE",
    "AccountChanged",
    "AccountInfo",
    "Amounts",
    "ApiError",
    "AttachRequest",
    "BadRequest",
    "CollaborationEpoch",
    "Conflict",
    "CoordinatorUnreachable",
    "CreditCheck",
    "CreditDifference",
    "DayAmounts",
    "Diagnostics",
    "Endpoint",
    "EngineApi",
    "EngineBusy",
    "EngineClient",
    "EngineState",
    "EngineUnavailable",
    "EpochFinished",
    "EpochPoint",
    "ErrorRaised",
    "Event",
    "Forbidden",
    "Guess",
    "HeldOutMeasured",
    "HeldOutPoint",
    "HistoryDay",
    "Leaderboard",
    "LeaderboardEntry",
    "LeaderboardTotals",
    "LoginRefused",
    "LoginRequest",
    "LoginRequired",
    "ManifestUpdated",
    "ModelAnswer",
    "MyRank",
    "Network",
    "NetworkChanged",
    "NotFound",
    "PeersSeen",
    "PreviewRequest",
    "Progress",
    "ProgressUpdated",
    "ProjectInfo",
    "ProjectList",
    "ProjectOffer",
    "ProjectOffers",
    "ProjectPreview",
    "ProjectUrl",
    "ProjectsChanged",
    "ReasonCode",
    "ResourceUse",
    "RolledBack",
    "Rounds",
    "SettingInfo",
    "Settings",
    "StateChanged",
    "StateName",
    "Statistics",
    "StorageFailed",
    "TooManyAttempts",
    "TrainingHistory",
    "TryModelRequest",
    "Unauthorized",
    "UnknownEventType",
    "UnsupportedMediaType",
    "VersionMismatch",
    "app_settings_path",
    "endpoint_path",
    "engine_output_path",
]


def __getattr__(name: str) -> Any:
    if name == "EngineClient":
        from core.api.client import EngineClient  # noqa: PLC0415 - see the module docstring

        return EngineClient
    raise AttributeError(f"module 'core.api' has no attribute {name!r}")
