"""``barnraise ctl``: drive the running engine from the command line.

    barnraise ctl status                 state, reason, project and progress
    barnraise ctl start                  opt in: contribute whenever the schedule allows
    barnraise ctl pause | resume         pause until resumed / resume (also ends a snooze)
    barnraise ctl snooze MINUTES         pause for a while; it ends by itself
    barnraise ctl settings               every preference with its value and meaning
    barnraise ctl set NAME=VALUE ...     change preferences (e.g. idle_minutes=5 run_on_battery=yes)
    barnraise ctl stats [--days N]       contribution from the ledger
    barnraise ctl attach MANIFEST [--initial-peers ADDR ...] [--data-base URL] [--device cpu]
    barnraise ctl detach NAME
    barnraise ctl events [--since N]     follow the engine's events (Ctrl-C to stop)
    barnraise ctl shutdown               stop the engine
    barnraise ctl login [--username U] [--password-stdin] [--signup]
                                         log in at the active project's coordinator (asks for the
                                         password without echoing it; --signup creates the account)
    barnraise ctl logout                 end the session and forget it
    barnraise ctl account                who is logged in, and until when the access pass is valid
    barnraise ctl leaderboard [--limit N] [--me]   the project's top volunteers, or your own rank

``--json`` prints the API's answer as JSON instead of text.
"""

from __future__ import annotations

import argparse
import datetime
import getpass
import json
import sys
from pathlib import Path
from typing import Any

from core.api import (
    AccountInfo,
    AttachRequest,
    BadRequest,
    EngineClient,
    EngineState,
    Leaderboard,
    LeaderboardEntry,
    MyRank,
    Statistics,
)
from core.api.codec import encode
from core.cli.signals import run_command
from core.scheduler import Preferences, PreferencesError

ACTIONS = (
    "status",
    "start",
    "pause",
    "resume",
    "snooze",
    "settings",
    "set",
    "stats",
    "attach",
    "detach",
    "events",
    "shutdown",
    "login",
    "logout",
    "account",
    "leaderboard",
)


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "ctl",
        help="drive the running engine (status, pause, resume, snooze, set, attach, ...)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("values", nargs="*", help="the action's arguments")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    parser.add_argument("--days", type=int, default=7, help="stats: days of history")
    parser.add_argument("--project", default=None, help="stats: one project only")
    parser.add_argument("--initial-peers", nargs="*", default=[], metavar="ADDR")
    parser.add_argument("--data-base", default=None, help="attach: where relative data URLs point")
    parser.add_argument("--device", default="cpu", help="attach: cpu, cuda, cuda:1, mps")
    parser.add_argument("--since", type=int, default=None, help="events: backlog after this seq")
    parser.add_argument("--count", type=int, default=0, help="events: stop after N (0: never)")
    parser.add_argument("--username", default=None, help="login: the account's name")
    parser.add_argument(
        "--password-stdin",
        action="store_true",
        help="login: read the password from the first line of standard input (for scripts)",
    )
    parser.add_argument("--signup", action="store_true", help="login: create the account first")
    parser.add_argument("--limit", type=int, default=10, help="leaderboard: how many volunteers")
    parser.add_argument("--me", action="store_true", help="leaderboard: your rank and history")
    parser.set_defaults(run=run)


async def _run(args: argparse.Namespace) -> int:
    async with EngineClient.discover() as client:
        result = await _dispatch(client, args)
    if result is not None:
        print(json.dumps(encode(result), indent=2) if args.json else _text(result))
    return 0


async def _dispatch(client: EngineClient, args: argparse.Namespace) -> Any:  # noqa: PLR0911
    action, values = args.action, args.values
    simple = {
        "status": client.state,
        "start": client.start,
        "pause": client.pause,
        "resume": client.resume,
        "settings": client.settings,
    }
    if action in simple:
        return await simple[action]()
    if action == "snooze":
        return await client.snooze(_minutes(values))
    if action == "set":
        return await client.set_settings(_assignments(values))
    if action == "stats":
        return await client.statistics(args.project, args.days)
    if action in ("attach", "detach"):
        if len(values) != 1:
            raise BadRequest(
                f"{action} takes one {'manifest path' if action == 'attach' else 'name'}"
            )
        if action == "detach":
            return await client.detach(values[0])
        request = AttachRequest(values[0], list(args.initial_peers), args.data_base, args.device)
        return await client.attach(request)
    if action == "events":
        await _follow(client, args)
        return None
    if action == "login":
        username, password = _credentials(args)
        return await client.login(username, password, signup=args.signup)
    if action == "logout":
        return await client.logout()
    if action == "account":
        return await client.account()
    if action == "leaderboard":
        return await (client.my_rank() if args.me else client.leaderboard(args.limit))
    await client.shutdown()
    return None


async def _follow(client: EngineClient, args: argparse.Namespace) -> None:
    seen = 0
    async for event in client.events(args.since):
        if args.json:
            print(json.dumps(event.to_wire()), flush=True)
        else:
            print(f"{event.seq:>5} {event.type}: {event.data}", flush=True)
        seen += 1
        if args.count and seen >= args.count:
            return


def _credentials(args: argparse.Namespace) -> tuple[str, str]:
    """The username and password, from the options, the terminal (no echo) or standard input."""
    username = args.username
    if args.password_stdin:
        if not username:
            raise BadRequest(
                "--password-stdin needs --username (standard input holds the password)"
            )
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        username = username or input("Username: ").strip()
        password = getpass.getpass(f"Password for {username}: ")
        if args.signup and getpass.getpass("The same password again: ") != password:
            raise BadRequest("the two passwords differ; nothing was sent")
    if not username or not password:
        raise BadRequest("a username and a password are needed to log in")
    return username, password


def _minutes(values: list[str]) -> float:
    try:
        (text,) = values
        return float(text)
    except ValueError:
        raise BadRequest("snooze takes one number of minutes, e.g. 'snooze 60'") from None


def _assignments(values: list[str]) -> dict[str, bool | int | float | str]:
    if not values:
        raise BadRequest("set takes NAME=VALUE pairs, e.g. 'set idle_minutes=5'")
    out: dict[str, bool | int | float | str] = {}
    for item in values:
        name, sep, text = item.partition("=")
        if not sep:
            raise BadRequest(f"{item!r} is not NAME=VALUE")
        try:
            out[name.strip()] = Preferences.parse_value(name.strip(), text.strip())  # type: ignore[assignment]
        except PreferencesError as exc:
            raise BadRequest(str(exc)) from None
    return out


def _text(result: Any) -> str:  # noqa: PLR0911 - one case per kind of answer
    if isinstance(result, AccountInfo):
        return _account_text(result)
    if isinstance(result, Leaderboard):
        return _leaderboard_text(result)
    if isinstance(result, MyRank):
        return _rank_text(result)
    if isinstance(result, EngineState):
        return _state_text(result)
    if isinstance(result, Statistics):
        return _stats_text(result)
    if hasattr(result, "values") and hasattr(result, "descriptions"):
        return "\n".join(
            f"{d.name} = {result.values.get(d.name)!r}\n    {d.help}" for d in result.descriptions
        )
    if hasattr(result, "projects"):
        return "\n".join(f"{p.name}{' (active)' if p.active else ''}: {p.manifest}" for p in
                         result.projects) or "no projects attached"  # fmt: skip
    if hasattr(result, "name") and hasattr(result, "manifest"):
        return f"attached {result.name}{' (active)' if result.active else ''}"
    return str(result)


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
        head = (
            f"{r.username}: rank {r.rank}{top} in {r.project}, {r.samples:,} samples, "
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


def _clock(when: float, *, dated: bool = False) -> str:
    moment = datetime.datetime.fromtimestamp(when)
    return moment.strftime("%Y-%m-%d %H:%M" if dated else "%H:%M:%S")


def run(args: argparse.Namespace) -> int:
    if args.action == "attach" and args.values:
        # the engine may run in another folder: send it an absolute path
        args.values = [str(Path(args.values[0]).expanduser().absolute()), *args.values[1:]]
    try:
        return run_command(lambda: _run(args), interrupted=0)
    finally:
        sys.stdout.flush()
