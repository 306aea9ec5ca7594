"""How ``barnraise ctl`` prints the engine's answers as text (``--json`` prints them as they are)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from core.api import (
    AccountInfo,
    CreditCheck,
    Diagnostics,
    EngineState,
    Leaderboard,
    LeaderboardEntry,
    ModelAnswer,
    MyRank,
    ProjectInfo,
    ProjectOffers,
    ProjectPreview,
    Statistics,
    TrainingHistory,
)
from core.util.amounts import below_floor

HISTORY_SHOWN = 20
"""Epochs ``history`` prints as text (``--json`` gives them all)."""
CREDIT_SHOWN = 20
"""Differing epochs ``credit`` prints as text (``--json`` gives them all)."""


def text(result: Any) -> str:
    """An answer of the engine as the lines ``barnraise ctl`` prints."""
    for kind, render in _RENDERERS:
        if isinstance(result, kind):
            return render(result)
    if hasattr(result, "values") and hasattr(result, "descriptions"):
        return "\n".join(
            f"{d.name} = {result.values.get(d.name)!r}\n    {d.help}" for d in result.descriptions
        )
    if hasattr(result, "projects"):
        return "\n".join(f"{p.name}{' (active)' if p.active else ''}: {p.manifest}" for p in
                         result.projects) or "no projects attached"  # fmt: skip
    return str(result)


_KEY_SOURCES = {
    "url": "named in the URL",
    "first-use": "not named anywhere: joining trusts it from now on",
    "pinned": "trusted when this project was joined",
}


def _answer_text(a: ModelAnswer) -> str:
    if not a.answered:
        return f"no answer: {a.reason}"
    source = "" if a.epoch is None else f" (the model of epoch {a.epoch})"
    if a.kind == "causal":
        return f"{a.text}{source}"
    guesses = [f"  {100 * g.probability:5.1f} %  {g.word}" for g in a.guesses]
    return "\n".join([f"{a.text}{source}", "guesses for the first missing word:", *guesses])


def preview_text(p: ProjectPreview) -> str:
    """A project URL's preview: what the project is, who signs it, what it would use here."""
    u = p.uses
    access = "moderated: contributing needs an account" if p.mode == "moderated" else "open"
    if p.mode == "moderated":
        access += "; volunteers may sign up" if p.allow_signup else "; the organizers invite"
    lines = [
        f"{p.name} ({p.kind}, manifest version {p.version}) at {p.url}",
        *(f"  {line}" for line in (p.description or "(no description)").splitlines()),
        f"access: {access}",
        f"coordinator: {p.coordinator_url or 'none'}",
        f"project key: {p.project_key} ({_KEY_SOURCES.get(p.key_source, p.key_source)})",
        f"would train on: {u.device}",
        (
            f"uses: {u.parameters:,} parameters, about {u.disk_bytes / 1e6:,.0f} MB of disk, "
            f"about {u.network_bytes_per_hour / 1e6:,.0f} MB of network an hour"
        ),
        *(f"  {note}" for note in u.notes),
    ]
    return "\n".join(lines)


def _project_text(p: ProjectInfo) -> str:
    """An attached project (the answer to attach, check and activate)."""
    joins = " (joins the demo swarm on this computer)" if p.local_swarm else ""
    lines = [f"attached {p.name}{' (active)' if p.active else ''}{joins}"]
    if p.source_url is not None:
        lines.append(f"from {p.source_url}, manifest version {p.manifest_version}")
        lines.append(f"project key {p.project_key}: updates must be signed by it")
    if p.update_refused:
        lines.append(f"the latest update was refused: {p.update_refused}")
    return "\n".join(lines)


def _offers_text(o: ProjectOffers) -> str:
    if not o.offers:
        return (
            "nothing to offer: start a demo swarm with 'barnraise swarm', or attach a project's "
            "manifest with 'barnraise ctl attach'"
        )
    lines = []
    for offer in o.offers:
        where = "running here" if offer.source == "local_swarm" else "attached"
        lines.append(f"{offer.name} ({where}): {offer.note}")
        lines.append(f"    {offer.manifest}")
    return "\n".join(lines)


def _history_text(h: TrainingHistory) -> str:
    if h.project is None:
        return "no project is attached"
    if not h.points:
        return f"{h.project}: no completed epoch seen yet" + _newest_held_out(h)
    shown = h.points[-HISTORY_SHOWN:]
    lines = [f"{h.project}: {len(h.points)} epoch(s) seen" + (
        f", the last {len(shown)} shown (--json for all)" if len(shown) < len(h.points) else ""
    )]  # fmt: skip
    # the held-out columns only where the project evaluates: blank where an epoch was not; the
    # unigram floor's only where the backbone reported one
    evaluated = {e.epoch: e for e in h.held_out}
    floored = any(e.floor is not None for e in h.held_out)
    held_out_title = f"  {'held-out':>8}  {'accuracy':>8}" if evaluated else ""
    if floored:
        held_out_title += f"  {'floor':>6}"
    lines.append(
        f"{'epoch':>6}  {'loss':>8}{held_out_title}  {'samples':>8}  {'samples/s':>9}  peers  time"
    )
    for p in shown:
        loss = f"{p.loss:.4f}" if p.loss is not None else "-"
        held_out = ""
        if evaluated:
            e = evaluated.get(p.epoch)
            figures = ("", "") if e is None else (_loss(e.loss), f"{100 * e.accuracy:.1f} %")
            held_out = f"  {figures[0]:>8}  {figures[1]:>8}"
            if floored:
                floor = "" if e is None or e.floor is None else f"{e.floor:.2f}"
                held_out += f"  {floor:>6}"
        lines.append(
            f"{p.epoch:>6}  {loss:>8}{held_out}  {p.samples:>8}  {p.samples_per_second:>9.1f}  "
            f"{p.peers:>5}  {_clock(p.time, dated=True)}"
        )
    return "\n".join(lines) + _newest_held_out(h)


def _loss(loss: float | None) -> str:
    return f"{loss:.4f}" if loss is not None else "-"


def _newest_held_out(h: TrainingHistory) -> str:
    """A last line with the newest held-out evaluation (its epoch may not have completed yet),
    and where it stands against the unigram floor, with a word on what that is."""
    if not h.held_out:
        return ""
    e = h.held_out[-1]
    figures = f"loss {_loss(e.loss)}" if e.floor is None else below_floor(e.loss, e.floor)
    line = (
        f"\nheld-out text, measured by the backbone at epoch {e.epoch}: {figures}, "
        f"accuracy {100 * e.accuracy:.1f} % ({e.samples} sequences)"
    )
    if e.floor is not None:
        line += "\n(the unigram floor: the loss of a model that only counts words)"
    return line


def _diagnostics_text(d: Diagnostics) -> str:
    lines = [
        (
            f"engine {d.engine_version} (API {d.api_version}), pid {d.pid}, "
            f"started {_clock(d.started, dated=True)}"
        ),
        f"platform: {d.platform}",
        f"python: {d.python}",
        f"torch: {d.torch or 'not loaded (the engine has not trained since it started)'}",
        "device:",
        *(f"  {line}" for line in d.accelerator),
        "paths:",
        *(f"  {name}: {path}" for name, path in d.paths.items()),
        f"the engine log's last {len(d.log_tail)} line(s):",
        *(f"  {line}" for line in d.log_tail),
    ]
    return "\n".join(lines)


def _state_text(s: EngineState) -> str:
    lines = [f"{s.state}: {s.reason}"]
    if s.project is not None:
        p = s.progress
        lines.append(f"project {s.project.name} ({s.project.device})")
        if p.epoch is not None:
            lines.append(
                f"epoch {p.epoch} (collaboration {p.collaboration_epoch}), "
                f"{p.samples_per_second:.1f} samples/s here, "
                f"{p.collaboration_samples_per_second:.1f} in all, {p.peers} peer(s)"
            )
        lines.append(f"samples this session: {p.session_samples}")
    if s.device is not None:
        lines.append(f"trains on {s.device.kind}: {s.device.name} ({s.device.reason})")
    if s.snoozed_until:
        until = datetime.datetime.fromtimestamp(s.snoozed_until).strftime("%H:%M")
        lines.append(f"snoozed until {until}")
    if s.threads:
        lines.append(f"threads {s.threads}, duty {s.duty:.0%}")
    lines.extend(f"note: {n}" for n in s.notes)
    if s.last_error:
        lines.append(f"last error: {s.last_error}")
    return "\n".join(lines)


def _stats_text(s: Statistics) -> str:
    t, d = s.totals, s.today
    lines = [
        (
            f"{s.project or 'all projects'}: {t.samples} samples, {t.compute_seconds / 3600:.2f} h "
            f"compute, {t.epochs} epochs, {t.rounds} rounds, {(t.bytes_sent + t.bytes_received) / 1e6:.1f}"
            " MB moved"
        ),
        f"today: {d.samples} samples, {d.compute_seconds / 60:.1f} min",
        f"this month: {s.month_bytes / 1e6:.1f} MB",
    ]
    lines.extend(f"  {day.day}: {day.amounts.samples} samples" for day in s.days)
    return "\n".join(lines)


def _account_text(a: AccountInfo) -> str:
    if a.project is None:
        return "no project is attached"
    if a.coordinator is None:
        return f"{a.project} is open to everyone: it has no coordinator and no accounts"
    if a.logged_in:
        lines = [f"logged in as {a.username} at {a.coordinator} ({a.project})"]
    else:
        needed = " (needed to take part)" if a.moderated else ""
        lines = [f"not logged in at {a.coordinator}{needed}; log in with 'barnraise ctl login'"]
    if a.pass_expires is not None:
        lines.append(f"access pass valid until {_clock(a.pass_expires)}")
    if a.error:
        lines.append(f"warning: {a.error}")
    return "\n".join(lines)


def _leaderboard_text(b: Leaderboard) -> str:
    t = b.totals
    lines = [
        (
            f"{b.project}: {t.users} volunteer(s), {t.samples:,} samples, "
            f"{t.compute_seconds / 3600:.1f} h of compute, {t.epochs} epoch(s)"
        ),
        f"{'rank':>4}  {'volunteer':<20} {'samples':>12} {'compute':>9}  devices  last seen",
    ]
    lines.extend(_entry_text(e) for e in b.users)
    if not b.users:
        lines.append("  (no contributions counted yet)")
    return "\n".join(lines)


def _entry_text(e: LeaderboardEntry, mark: str = " ") -> str:
    seen = _clock(e.last_seen, dated=True) if e.last_seen else "-"
    return (
        f"{e.rank:>4}{mark} {e.username:<20} {e.samples:>12,} {e.compute_seconds / 3600:>7.1f} h"
        f"  {e.active_devices:>2}/{e.devices:<4}  {seen}"
    )


def _rank_text(r: MyRank) -> str:
    if r.rank is None:
        head = f"{r.username}: no contribution counted yet in {r.project}"
    else:
        top = f" (percentile {r.percentile:.0f})" if r.percentile is not None else ""
        experts = f" ({r.expert_samples:,} by your expert servers)" if r.expert_samples > 0 else ""
        head = (
            f"{r.username}: rank {r.rank}{top} in {r.project}, {r.samples:,} samples{experts}, "
            f"{r.compute_seconds / 3600:.1f} h of compute"
        )
    lines = [head]
    me = LeaderboardEntry(r.rank or 0, r.username, r.samples, r.compute_seconds)
    neighbours = [*r.above, *([me] if r.rank is not None else []), *r.below]
    lines.extend(_entry_text(e, "*" if e is me else " ") for e in neighbours)
    for label, days in (("last 7 days", r.history_7d), ("last 30 days", r.history_30d)):
        total = sum(d.samples for d in days)
        lines.append(f"{label}: {total:,} samples")
    lines.extend(f"  {d.day}: {d.samples:,} samples" for d in r.history_7d)
    return "\n".join(lines)


def _credit_text(c: CreditCheck) -> str:
    lines = [f"{c.project}, peer key {c.peer}:", c.summary]
    if c.since is not None:
        lines.append(
            f"compared: {c.epochs:,} epoch(s) from epoch {c.since} on; this computer counted "
            f"{c.local_samples:,} samples, the project credited {c.credited_samples:,}"
        )
    lines.append(f"credited to this key in all: {c.credited_total:,} samples")
    if c.differences:
        lines.append(f"{'epoch':>8} {'here':>10} {'credited':>10}  why")
        lines.extend(
            f"{d.epoch:>8} {d.local:>10,} {d.credited:>10,}  {d.reason}"
            for d in c.differences[:CREDIT_SHOWN]
        )
        if len(c.differences) > CREDIT_SHOWN:
            lines.append(
                f"... and {len(c.differences) - CREDIT_SHOWN} more (--json lists them all)"
            )
    return "\n".join(lines)


def _clock(when: float, *, dated: bool = False) -> str:
    moment = datetime.datetime.fromtimestamp(when)
    return moment.strftime("%Y-%m-%d %H:%M" if dated else "%H:%M:%S")


_RENDERERS: tuple[tuple[type[Any], Callable[[Any], str]], ...] = (
    (AccountInfo, _account_text),
    (Leaderboard, _leaderboard_text),
    (MyRank, _rank_text),
    (CreditCheck, _credit_text),
    (EngineState, _state_text),
    (Statistics, _stats_text),
    (ProjectOffers, _offers_text),
    (TrainingHistory, _history_text),
    (Diagnostics, _diagnostics_text),
    (ProjectPreview, preview_text),
    (ProjectInfo, _project_text),
    (ModelAnswer, _answer_text),
)
"""The answer kinds with a text of their own, each with its renderer."""
