"""Numbers, sizes, times, events and projects in the plain words the window shows.

Pure functions (no Qt), so the wording is tested on its own: "1.84 M", "1.2 GB", "3 h 12 min",
"5 min ago", "Mon 16", "Members only: log in or create an account".
"""

from __future__ import annotations

import datetime as _dt
import math

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
)
from core.api.modes import active_modes
from core.api.schema import (
    AccountInfo,
    Network,
    ProjectInfo,
    ResourceUse,
    Rounds,
    Statistics,
    TrainingDevice,
)

STATE_WORDS = {
    "idle": "Idle",
    "paused": "Paused",
    "waiting": "Waiting",
    "starting": "Starting",
    "running": "Contributing",
    "throttled": "Contributing slowly",
    "error": "Problem",
}


def state_line(state: str, reason: str) -> str:
    """The state in one line: the engine's reasons usually begin with it ("Waiting: …"), and then
    are enough alone; otherwise the state word goes first."""
    word = STATE_WORDS.get(state, state)
    if reason.lower().startswith(word.lower().split()[0]) or reason.lower().startswith(state):
        return reason
    return f"{word}: {reason}"


def count(n: float) -> str:
    """A count for a tile: 987 → "987", 12345 → "12.3 k", 1843200 → "1.84 M"."""
    if not math.isfinite(n):
        return "–"
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n < 10_000:
        return f"{sign}{n:,.0f}"
    return sign + _scaled(n, ((1e3, "k"), (1e6, "M"), (1e9, "B"), (1e12, "T")))


def _scaled(n: float, units: tuple[tuple[float, str], ...]) -> str:
    """Three significant digits in the largest unit that keeps the number under 1000 *after*
    rounding (999,999 is "1.00 M", never "1000 k")."""
    for i, (size, suffix) in enumerate(units):
        text = _three_digits(n / size)
        if float(text) < 1000 or i == len(units) - 1:
            return f"{text} {suffix}"
    raise AssertionError("unreachable")


def _three_digits(x: float) -> str:
    for decimals, limit in ((2, 9.995), (1, 99.95)):
        if x < limit:
            return f"{x:.{decimals}f}"
    return f"{x:.0f}"


def data_size(n_bytes: float) -> str:
    """Decimal units, as network plans count them: 1_234_000_000 → "1.23 GB"."""
    if n_bytes < 999.5:
        return f"{n_bytes:.0f} B"
    return _scaled(n_bytes, ((1e3, "kB"), (1e6, "MB"), (1e9, "GB"), (1e12, "TB")))


def duration(seconds: float) -> str:
    """ "45 s", "12 min", "3 h 12 min", "2 d 4 h" (rounded before the unit is chosen)."""
    seconds = max(0.0, seconds)
    if round(seconds) < 60:
        return f"{round(seconds)} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours_, minutes = divmod(minutes, 60)
    if hours_ < 48:
        return f"{hours_} h {minutes} min" if minutes else f"{hours_} h"
    days, hours_ = divmod(hours_, 24)
    return f"{days} d {hours_} h" if hours_ else f"{days} d"


def hours(seconds: float) -> str:
    """Compute time: hours with one decimal from an hour on (11520 → "3.2 h"), minutes below
    (so a first session reads "25 min", not "0.4 h"), seconds below a minute."""
    if round(seconds) < 60:
        return f"{round(seconds)} s"
    if round(seconds / 60) < 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def clock(timestamp: float) -> str:
    return _dt.datetime.fromtimestamp(timestamp).strftime("%H:%M")


def moment(timestamp: float, now: float) -> str:
    """When something happened: "14:02", "yesterday 14:02" or "3 Nov 14:02"."""
    then = _dt.datetime.fromtimestamp(timestamp)
    today = _dt.datetime.fromtimestamp(now).date()
    days = (today - then.date()).days
    if days == 0:
        return then.strftime("%H:%M")
    if days == 1:
        return f"yesterday {then.strftime('%H:%M')}"
    return f"{then.day} {then.strftime('%b %H:%M')}"


def ago(timestamp: float, now: float) -> str:
    """ "just now", "5 min ago", "3 h ago", "yesterday 14:02"."""
    seconds = now - timestamp
    if seconds < 45:
        return "just now"
    if round(seconds / 60) < 60:
        return f"{max(1, round(seconds / 60))} min ago"
    if round(seconds / 3600) < 6:
        return f"{round(seconds / 3600)} h ago"
    return moment(timestamp, now)


def day_label(day: str, *, month: bool = False) -> str:
    """ "2026-11-16" → "Mon 16" (chart categories), or "Mon 16 Nov" with ``month``."""
    try:
        date = _dt.date.fromisoformat(day)
    except ValueError:
        return day
    label = f"{date.strftime('%a')} {date.day}"
    return f"{label} {date.strftime('%b')}" if month else label


def short_date(day: str) -> str:
    """ "2026-11-16" → "16 Nov"."""
    try:
        date = _dt.date.fromisoformat(day)
    except ValueError:
        return day
    return f"{date.day} {date.strftime('%b')}"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


CHECKING_NETWORK = "Checking how others can reach you…"


def network_line(network: Network) -> str:
    """How others reach this computer, in one line for the dashboard.

    "Reachable from the internet"; behind a router, how we reach our peers instead: "direct to 3
    of 4 peers" (hole-punched connections are direct too), or "through a relay" when none is.
    """
    if network.reachability == "public":
        return "Reachable from the internet"
    if network.reachability != "private":
        return CHECKING_NETWORK
    direct = network.direct + network.punched
    if network.peers == 0:
        return "Behind a router: not connected to other peers yet"
    if direct == 0:
        return "Behind a router: through a relay"
    if direct == network.peers:
        return f"Behind a router: direct to {'all ' if direct > 1 else ''}{_peers(direct)}"
    return f"Behind a router: direct to {direct} of {_peers(network.peers)}"


def device_line(device: TrainingDevice) -> str:
    """Where training runs, and why, in one line for the dashboard."""
    return f"Trains on {device.name}: {device.reason}"


def device_detail(device: TrainingDevice) -> str:
    """The line's tooltip: the versions behind the choice."""
    parts = [f"Device setting: {device.setting}"]
    if device.driver:
        cuda = f" (CUDA {device.cuda})" if device.cuda else ""
        parts.append(f"NVIDIA driver {device.driver}{cuda}")
    parts.append(f"torch {device.torch}" if device.torch else "torch is not installed")
    return "\n".join(parts)


def rounds_line(rounds: Rounds) -> str | None:
    """A project's round, last exchange and how late this computer's work lands, in one line for
    the dashboard, when its mode's rounds end on the shared clock (diloco): "Round: 34 s of 1 min
    · Last exchange: 1.23 MB sent, on time"; None in a mode without such rounds (dedloc: its
    epochs say it all) or one this app does not know."""
    mode = active_modes().get(rounds.mode)
    if mode is None or not mode.clock_rounds or rounds.round_seconds is None:
        return None
    elapsed = duration(rounds.round_elapsed or 0.0)
    sent = rounds.last_exchange_bytes
    exchange = "none yet" if sent is None else f"{data_size(sent)} sent{_lateness(rounds)}"
    return f"Round: {elapsed} of {duration(rounds.round_seconds)} · Last exchange: {exchange}"


def _lateness(rounds: Rounds) -> str:
    late = rounds.work_late
    if late is None:
        return ""
    if late == 0:
        return ", on time"
    return f", work {late} round{'s' if late > 1 else ''} late"


def rounds_detail(rounds: Rounds) -> str:
    """The line's tooltip: how the project's mode trains, in words for volunteers, and what late
    work means when this computer's was."""
    mode = active_modes().get(rounds.mode)
    said = mode.for_people if mode is not None else f"This project trains in {rounds.mode} mode"
    if rounds.work_late:
        said += (
            ". This computer's last work reached the others a round or more after it was done "
            "(it missed a round's exchange, or came late to it): it still counts in full"
        )
    return said


def network_detail(network: Network, now: float) -> str:
    """The line's tooltip: where others reach us, and when that was checked."""
    checked = f" (checked {ago(network.checked_at, now)})" if network.checked_at else ""
    if network.reachability == "public" and network.public_address:
        return f"Other peers can connect to this computer at {network.public_address}{checked}"
    if network.reachability == "private":
        return (
            "Other peers cannot connect to this computer by themselves; it connects to them, "
            f"directly where possible and otherwise through a relay{checked}"
        )
    return "Other peers are being asked to connect back to this computer"


def _peers(n: int) -> str:
    return f"{n} peer" if n == 1 else f"{n} peers"


FLOOR_NAME = "unigram floor (word counts only)"
"""What the held-out curve's level line is called: the loss of a model that knows how often each
token occurs and nothing of context."""


def beside_floor(loss: float | None, floor: float | None) -> str:
    """Where a held-out loss stands against the unigram floor: "0.51 below the unigram floor
    (6.24)" (below: the model uses context); "" without both."""
    if loss is None or floor is None:
        return ""
    gap = floor - loss
    return f"{abs(gap):.2f} {'below' if gap >= 0 else 'above'} the unigram floor ({floor:.2f})"


def describe_event(event: Event) -> tuple[str, str]:  # noqa: PLR0911, PLR0912 - a case a type
    """(kind, text) of one event for the event log."""
    data: object = event.data  # not narrowed to the known types: a newer engine may send others
    if isinstance(data, StateChanged):
        return "State", data.reason  # the engine's reasons start with the state in words
    if isinstance(data, EpochFinished):
        shared = (
            f"averaged with {data.group_size - 1} other peer(s)"
            if data.averaged and data.group_size > 1
            else "not averaged"
        )
        return "Epoch", (
            f"Finished epoch {data.epoch} with {count(data.samples)} of our samples; {shared} "
            f"({data.seconds:.1f} s)"
        )
    if isinstance(data, CollaborationEpoch):
        loss = "unknown" if data.point.loss is None else f"{data.point.loss:.3f}"
        return "Collaboration", (
            f"Epoch {data.point.epoch} done by {data.point.peers} peer(s): loss {loss}, "
            f"{count(data.point.samples)} samples"
        )
    if isinstance(data, HeldOutMeasured):
        loss = "unknown" if data.point.loss is None else f"{data.point.loss:.3f}"
        floor = beside_floor(data.point.loss, data.point.floor)
        return "Collaboration", (
            f"The model of epoch {data.point.epoch} measured on held-out text: loss {loss}, "
            f"{100 * data.point.accuracy:.1f} % of tokens right" + (f"; {floor}" if floor else "")
        )
    if isinstance(data, PeersSeen):
        return "Peers", f"{data.peers} peer(s) training on {data.project}"
    if isinstance(data, ErrorRaised):
        return "Error", f"{data.where}: {data.message}"
    if isinstance(data, ProjectsChanged):
        names = ", ".join(data.projects) or "none"
        return "Projects", f"Projects: {names}; active: {data.active or 'none'}"
    if isinstance(data, AccountChanged):
        account = data.account
        if account.error:
            return "Account", f"Account problem: {account.error}"
        if account.logged_in:
            return "Account", f"Logged in as {account.username} at {account.coordinator}"
        return "Account", "Logged out"
    if isinstance(data, NetworkChanged):
        return "Network", network_line(data.network)
    if isinstance(data, ProgressUpdated):
        p = data.progress
        return "Progress", f"{p.samples_per_second:.0f} samples/s, {p.peers} peer(s)"
    if isinstance(data, ManifestUpdated):
        if data.applied:
            what = f": {data.reason}" if data.reason else ""
            return "Project", f"{data.project}: manifest version {data.version} applied{what}"
        return "Project", (
            f"{data.project}: manifest version {data.version} refused: {data.reason}"
        )
    if isinstance(data, RolledBack):
        reason = f": {data.reason}" if data.reason else ""
        return "Rollback", (
            f"Rolled back to the checkpoint of epoch {data.to_epoch} by the moderators{reason}; "
            f"training goes on at epoch {data.epoch}"
        )
    return "Event", type(data).__name__


# ---- a project before joining it (the first run's preview) ---------------------------------------

PROJECT_KINDS = {
    "collaborative": "Collaborative training: every volunteer trains the whole model, and together "
    "they average what they learned",
    "dmoe": "Mixture of experts: volunteers host and train parts (experts) of one large model",
}

KEY_CHECKS = {
    "url": "matches the key in the link",
    "first-use": "first use: this key will be pinned; check it with the organizer",
    "pinned": "matches the key pinned when this computer first joined the project",
}
"""How the project key of a preview was verified, by ``ProjectPreview.key_source``."""


def unchecked_key(url: str, key: str) -> tuple[str, str]:
    """(banner level, words) for a project looked up by a link that names no project key
    (``key_source`` "first-use"): whoever answered signed what the preview shows, and joining
    pins that key. Plain ``http://`` gets the louder words: anyone on the way can answer."""
    if url.startswith("http://"):
        return "error", (
            "Warning: the project key could not be checked, and this address is plain http://, "
            "not encrypted. The link names no key (#key=…), so anyone on the network between "
            "this computer and the project could have answered in its place, with a key of "
            f"their own. The key that answered is {key}. Join only if the organizers give you "
            "this very key (better: ask them for the link with #key=); joining trusts it from "
            "now on, and every update must be signed by it."
        )
    return "warning", (
        "The project key could not be checked: the link names no key (#key=…), so Barnraise "
        f"trusts the key that answered, {key}. Compare it with the key the organizers publish "
        "(or ask them for the link with #key=) before you join: joining trusts it from now on, "
        "and every update must be signed by it."
    )


TRUST_KEY = "&Trust this key: it is the one the organizers publish"
"""The box a volunteer ticks before joining by a link that names no key."""


def project_kind(kind: str) -> str:
    return PROJECT_KINDS.get(kind, f"{kind} (a kind of project this version does not know)")


def project_access(mode: str, allow_signup: bool) -> str:
    """Who may contribute: open, or members only (and how one becomes a member)."""
    if mode == "open":
        return "Open to everyone: no account needed"
    if allow_signup:
        return "Members only: log in, or create an account at the project"
    return "Members only: the organizers make the accounts; ask them for one"


def key_check(source: str) -> str:
    return KEY_CHECKS.get(source, "not verified")


def short_key(key: str) -> str:
    """A PeerID short enough to read aloud: "12D3KooW…Xz9Qe1" (the whole one is in a tooltip)."""
    return key if len(key) <= 20 else f"{key[:8]}…{key[-6:]}"


def resource_lines(uses: ResourceUse, kind: str) -> list[tuple[str, str]]:
    """(label, text) rows for what contributing would use on this computer."""
    model = "Experts hosted here" if kind == "dmoe" else "Model"
    return [
        ("Trains on", uses.device),
        (model, f"{count(uses.parameters)} parameters"),
        ("Disk", f"about {data_size(uses.disk_bytes)} (checkpoints and the data cache)"),
        ("Network", f"about {data_size(uses.network_bytes_per_hour)} per hour while contributing"),
    ]


def update_refused_line(reason: str) -> str:
    """The one line an attached project shows while its latest signed update is refused."""
    reason = reason.strip().rstrip(".")
    return f"The project's latest update was not applied: {reason}."


# ---- the attached projects (the Projects page) ---------------------------------------------------

PROJECT_KIND_NAMES = {"collaborative": "Collaborative training", "dmoe": "Mixture of experts"}


def project_kind_name(kind: str) -> str:
    """A kind of project in two or three words (``project_kind`` says what it means)."""
    return PROJECT_KIND_NAMES.get(kind, kind)


def project_origin(project: ProjectInfo) -> str:
    """Where an attached project was joined from: its address, a manifest file, the demo swarm."""
    if project.local_swarm:
        return "The demo swarm running on this computer"
    if project.source_url is not None:
        version = project.manifest_version
        return project.source_url + (f" · manifest version {version}" if version else "")
    return f"The manifest file {project.manifest}"


def project_account(moderated: bool, *, active: bool, account: AccountInfo | None) -> str:
    """Whether contributing to an attached project needs an account, and (the active project's,
    with the ``account`` the engine holds for it) whether this computer is logged in there."""
    if not moderated:
        return "Open to everyone: no account needed"
    if not active or account is None:
        return "Members only: needs a login at its coordinator"
    if account.logged_in:
        return f"Members only: logged in as {account.username}"
    return "Members only: not logged in; log in to contribute"


def project_figures(statistics: Statistics | None) -> str:
    """What this computer contributed to one project (its own rows of the ledger)."""
    if statistics is None:
        return "Reading its figures…"
    totals = statistics.totals
    if not totals.samples and not totals.compute_seconds:
        return "Nothing contributed to it yet"
    return (
        f"{count(totals.samples)} samples · {hours(totals.compute_seconds)} of compute · "
        f"{count(totals.epochs)} epochs · {count(statistics.today.samples)} samples today"
    )


def switch_tip(name: str, active: str | None) -> str:
    """What "Contribute to this project" does for ``name`` while ``active`` is the active one."""
    if active is None:
        return f"Make {name} the project this computer contributes to"
    return (
        f"Contribute to {name} instead of {active} (one project at a time); what {active} "
        "counted stays counted"
    )


def leave_question(name: str, *, active: str | None, next_active: str | None) -> tuple[str, str]:
    """(question, details) for leaving the attached project ``name``: what happens now, what is
    kept and what is lost. ``active``: the project contributed to now; ``next_active``: the one
    the engine makes active if ``name`` is it (the first of the others), None if none is left."""
    if name != active:
        stays = f"{active} stays the one" if active else "no other project becomes the one"
        now = f"Barnraise removes {name} from your projects; {stays} this computer contributes to."
    elif next_active is not None:
        now = (
            f"This computer stops contributing to {name} (its last work is counted first); "
            f"{next_active} becomes the project it contributes to."
        )
    else:
        now = (
            f"This computer stops contributing to {name} (its last work is counted first). No "
            "project is left: Barnraise then asks you to join one."
        )
    details = (
        f"{now}\n\nKept: what this computer contributed to {name}, which your statistics go on "
        "counting; your account at its coordinator, if it has one, and what it credited you with "
        "there; its files, such as checkpoints, in Barnraise's cache folder.\n\nNot kept: its "
        f"place among your projects. To contribute to {name} again, join it again with "
        "File ▸ Add project…"
    )
    return f"Leave {name}?", details
