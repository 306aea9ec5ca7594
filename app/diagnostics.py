"""The "copy diagnostics" report: what a bug report needs, in plain text, and nothing secret.

Versions (app, engine, Python, Qt, platform), the engine's state and what its sensors cannot tell,
the projects and the account's name (never a password, a token or a key), the app's connection
history, the recent events, and the engine's log tail.
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Iterable

from app import wording
from core.api.events import Event
from core.api.program import VERSION
from core.api.schema import AccountInfo, Diagnostics, EngineState, ProjectInfo


def report(
    *,
    state: EngineState | None,
    account: AccountInfo | None,
    projects: list[ProjectInfo] | None,
    events: Iterable[Event],
    connection: tuple[str, str],
    engine: Diagnostics | None,
    engine_error: str | None,
    qt_version: str,
    now: float | None = None,
) -> str:
    now = time.time() if now is None else now
    lines = [
        f"Barnraise diagnostics, {time.strftime('%Y-%m-%d %H:%M:%S %z', time.localtime(now))}",
        "",
        "== App",
        f"app version {app_version()}; Python {sys.version.split()[0]}; Qt {qt_version}",
        f"platform {platform.platform()}",
        f"connection: {connection[0]} — {connection[1]}",
        "",
        "== Engine",
    ]
    if engine is not None:
        lines += [
            f"engine version {engine.engine_version}, API {engine.api_version}, pid {engine.pid}",
            (
                f"running since {wording.moment(engine.started, now)} on {engine.platform}, "
                f"Python {engine.python}, torch {engine.torch or 'not loaded'}"
            ),
            *(f"{name}: {path}" for name, path in sorted(engine.paths.items())),
            *(f"device: {line}" for line in engine.accelerator),
        ]
    else:
        lines.append(f"no diagnostics from the engine: {engine_error or 'not connected'}")
    if state is not None:
        lines += [
            f"state {state.state} ({state.code}): {state.reason}",
            (
                f"contribute={state.contribute} user_paused={state.user_paused} "
                f"snoozed_until={state.snoozed_until} threads={state.threads} duty={state.duty}"
            ),
            f"progress: {state.progress}",
            *(f"sensor note: {note}" for note in state.notes),
        ]
        if state.last_error:
            lines.append(f"last error: {state.last_error}")
        if state.device is not None:
            device = state.device
            lines.append(f"trains on {device.kind}: {device.name} ({device.reason})")
    lines += ["", "== Projects"]
    for project in projects or []:
        mark = " (active)" if project.active else ""
        lines.append(
            f"{project.name}{mark}: manifest {project.manifest}; peers {project.initial_peers}; "
            f"data {project.data_base}; device {project.device}; local swarm {project.local_swarm}"
        )
    if account is not None:
        lines += [
            "",
            "== Account",
            (
                f"coordinator {account.coordinator}; user {account.username}; "
                f"logged in {account.logged_in}; moderated {account.moderated}"
            ),
        ]
        if account.error:
            lines.append(f"account problem: {account.error}")
    lines += ["", "== Recent events (oldest first)"]
    for event in list(events)[-100:]:
        kind, text = wording.describe_event(event)
        stamp = time.strftime("%H:%M:%S", time.localtime(event.time))
        lines.append(f"{stamp} #{event.seq} {kind}: {text}")
    if engine is not None and engine.log_tail:
        lines += ["", "== Engine log (last lines)", *engine.log_tail]
    return "\n".join(lines) + "\n"


def app_version() -> str:
    return VERSION  # core's: the app ships with the engine, installed or bundled or from a checkout
