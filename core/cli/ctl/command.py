"""``barnraise ctl``: drive the running engine from the command line.

    barnraise ctl status                 state, reason, project and progress
    barnraise ctl start                  opt in: contribute whenever the schedule allows
    barnraise ctl pause | resume         pause until resumed / resume (also ends a snooze)
    barnraise ctl snooze MINUTES         pause for a while; it ends by itself
    barnraise ctl settings               every preference with its value and meaning
    barnraise ctl set NAME=VALUE ...     change preferences (e.g. idle_minutes=5 run_on_battery=yes)
    barnraise ctl stats [--days N]       contribution from the ledger
    barnraise ctl attach MANIFEST [--initial-peers ADDR ...] [--data-base URL] [--device auto]
    barnraise ctl attach --local-swarm [MANIFEST]
                                         join the demo swarm running on this computer
                                         ('barnraise swarm'), wherever it listens each run
    barnraise ctl attach https://PROJECT-URL[/#key=PEERID] [--device auto] [--data-base URL]
                                         join by the project's URL: prints what it is, who
                                         signs it and what it would use, then joins, pinning
                                         its project key (signed updates are taken later)
    barnraise ctl preview URL            what the project at URL is, without joining it
    barnraise ctl check NAME             look now for a signed update of a project joined by URL
    barnraise ctl activate NAME          contribute to the attached project NAME instead of the
                                         active one (whose peer stops; its counts stay); log in
                                         again if NAME is moderated ('barnraise ctl login')
    barnraise ctl detach NAME
    barnraise ctl offers                 projects to pick: local demo swarms, attached projects
    barnraise ctl history                the active project's loss curve, epoch by epoch, and
                                         the loss on held-out text where the project measures it
    barnraise ctl try "TEXT"             ask the active project's model: its top guesses for a
                                         [MASK] (or ___) in TEXT, or TEXT completed by a causal model
    barnraise ctl diagnostics            versions, folders and the engine log's last lines
    barnraise ctl events [--since N]     follow the engine's events (Ctrl-C to stop)
    barnraise ctl shutdown               stop the engine
    barnraise ctl login [--username U] [--password-stdin] [--signup]
                                         log in at the active project's coordinator (asks for the
                                         password without echoing it; --signup creates the account)
    barnraise ctl logout                 end the session and forget it
    barnraise ctl account                who is logged in, and until when the access pass is valid
    barnraise ctl leaderboard [--limit N] [--me]   the project's top volunteers, or your own rank
    barnraise ctl credit                 whether this computer's own count of its epochs matches
                                         what the project's coordinator credited, and if not,
                                         which epochs differ and why

``--json`` prints the API's answer as JSON instead of text.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from core.api import (
    AttachRequest,
    BadRequest,
    EngineClient,
)
from core.api.codec import encode
from core.api.project_url import is_project_url
from core.cli.ctl.text import preview_text, text
from core.cli.signals import run_command
from core.policy import Preferences, PreferencesError

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
    "preview",
    "check",
    "activate",
    "detach",
    "events",
    "shutdown",
    "login",
    "logout",
    "account",
    "leaderboard",
    "credit",
    "offers",
    "history",
    "try",
    "diagnostics",
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
    parser.add_argument(
        "--device", default="auto", help="attach: auto (the best here), cpu, cuda, cuda:1, mps"
    )
    parser.add_argument(
        "--local-swarm",
        action="store_true",
        help="attach: join the demo swarm running on this computer (its addresses change each run)",
    )
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
        print(json.dumps(encode(result), indent=2) if args.json else text(result))
    return 0


async def _dispatch(client: EngineClient, args: argparse.Namespace) -> Any:  # noqa: PLR0911
    action, values = args.action, args.values
    simple = {
        "status": client.state,
        "start": client.start,
        "pause": client.pause,
        "resume": client.resume,
        "settings": client.settings,
        "offers": client.offers,
        "history": client.history,
        "diagnostics": client.diagnostics,
        "credit": client.credit_check,
    }
    if action in simple:
        return await simple[action]()
    if action == "snooze":
        return await client.snooze(_minutes(values))
    if action == "set":
        return await client.set_settings(_assignments(values))
    if action == "stats":
        return await client.statistics(args.project, args.days)
    if action in ("attach", "detach", "preview", "check", "activate"):
        return await _project_action(client, args)
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
    if action == "try":
        if len(values) != 1:
            raise BadRequest('try takes one text in quotes, e.g. barnraise ctl try "the [MASK] is"')
        return await client.try_model(values[0])
    if action == "leaderboard":
        return await (client.my_rank() if args.me else client.leaderboard(args.limit))
    await client.shutdown()
    return None


async def _project_action(client: EngineClient, args: argparse.Namespace) -> Any:
    """attach, detach, preview, check and activate."""
    action, values = args.action, args.values
    if action == "attach" and args.local_swarm:
        return await client.attach(await _local_swarm_request(client, values, args.device))
    if len(values) != 1:
        wanted = {"attach": "manifest path or project URL", "preview": "project URL"}
        raise BadRequest(f"{action} takes one {wanted.get(action, 'project name')}")
    by_name: dict[str, Callable[[str], Awaitable[Any]]] = {
        "detach": client.detach,
        "preview": client.preview_project,
        "check": client.check_project,
        "activate": client.activate_project,
    }
    if action in by_name:
        return await by_name[action](values[0])
    if is_project_url(values[0]):
        return await _attach_url(client, args, values[0])
    request = AttachRequest(values[0], list(args.initial_peers), args.data_base, args.device)
    return await client.attach(request)


async def _attach_url(client: EngineClient, args: argparse.Namespace, url: str) -> Any:
    """Show what the project at ``url`` is and would use, then join it, pinning the key shown
    (the engine refuses the attach if what it fetches then is signed by another)."""
    preview = await client.preview_project(url)
    if not args.json:
        print(preview_text(preview), end="\n\n", flush=True)
    request = AttachRequest(
        url,
        list(args.initial_peers),
        args.data_base,
        args.device,
        pinned_key=preview.project_key,
    )
    return await client.attach(request)


async def _local_swarm_request(
    client: EngineClient, values: list[str], device: str
) -> AttachRequest:
    """Attach the demo swarm named by its manifest, or the only one running here."""
    if len(values) > 1:
        raise BadRequest("attach --local-swarm takes at most one manifest path")
    if values:
        return AttachRequest(values[0], device=device, local_swarm=True)
    running = [o for o in (await client.offers()).offers if o.source == "local_swarm"]
    if not running:
        raise BadRequest(
            "no demo swarm runs on this computer (or its project is attached already); "
            "start one with 'barnraise swarm'"
        )
    if len(running) > 1:
        names = ", ".join(f"{o.name} ({o.manifest})" for o in running)
        raise BadRequest(f"several demo swarms run here: {names}; name one by its manifest")
    return AttachRequest(running[0].manifest, device=device, local_swarm=True)


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


def run(args: argparse.Namespace) -> int:
    if args.action == "attach" and args.values and not is_project_url(args.values[0]):
        # the engine may run in another folder: send it an absolute path
        args.values = [str(Path(args.values[0]).expanduser().absolute()), *args.values[1:]]
    try:
        return run_command(lambda: _run(args), interrupted=0)
    finally:
        sys.stdout.flush()
