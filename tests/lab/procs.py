"""Barnraise processes inside lab namespaces: their JSON-line events, read on a thread each."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.lab.natlab import NatLab

ROOT = Path(__file__).resolve().parents[2]
Event = dict[str, Any]


class LabProcess:
    """One ``barnraise`` command in a namespace; its stdout events kept in order, stderr in a file.

    Each process gets its own ``BARNRAISE_HOME`` beside its log (unless ``env`` names one): the lab's
    homes are separate computers, and nothing a test runs may write to the real user's folders."""

    def __init__(
        self,
        lab: NatLab,
        where: str,
        args: Sequence[str],
        log: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.where = where
        self.log = log
        self.events: list[Event] = []
        self._queue: queue.Queue[Event | None] = queue.Queue()
        full_env = dict(os.environ)
        full_env["BARNRAISE_HOME"] = str(log.with_suffix(".home"))
        full_env.update(env or {})
        with log.open("ab") as stderr:
            argv = [sys.executable, "-m", "core.cli.main", "--log-level", "info", *args]
            self.proc = lab.spawn(
                where, argv, env=full_env, stdout=subprocess.PIPE, stderr=stderr, cwd=ROOT
            )
        self._reader = threading.Thread(target=self._read, name=f"lab-{where}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # e.g. an address printed as plain text
            if isinstance(event, dict):
                self._queue.put(event)
        self._queue.put(None)

    def next_event(self, timeout: float) -> Event:
        try:
            event = self._queue.get(timeout=timeout)
        except queue.Empty:
            message = f"{self.where}: no event within {timeout:g} s\n{self.tail()}"
            raise AssertionError(message) from None
        if event is None:
            raise AssertionError(f"{self.where}: the process ended\n{self.tail()}")
        self.events.append(event)
        return event

    def wait_for(self, predicate: Callable[[Event], bool], timeout: float) -> Event:
        deadline = time.monotonic() + timeout
        for event in self.events:
            if predicate(event):
                return event
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"{self.where}: nothing matched in {timeout:g} s\n{self.tail()}"
                )
            event = self.next_event(left)
            if predicate(event):
                return event

    def drain(self) -> list[Event]:
        """Every event printed so far, without waiting: those read by ``wait_for`` and the rest."""
        while True:
            try:
                event = self._queue.get_nowait()
            except queue.Empty:
                return self.events
            if event is None:
                self._queue.put(None)  # the end stays the end for a later ``next_event``
                return self.events
            self.events.append(event)

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])


def peer_args(project: Path, work: Path, *extra: str) -> list[str]:
    """A lab peer's arguments: the project, its own work folder, one thread (the lab's peers
    share the machine's cores)."""
    return ["--manifest", str(project), "--work-dir", str(work), "--threads", "1", *extra]


def wait_connected(proc: LabProcess, peer: str, kinds: set[str], timeout: float) -> str:
    """How ``proc`` is connected to ``peer`` once it is one of ``kinds`` (direct, punched,
    relayed)."""
    event = proc.wait_for(
        lambda e: e.get("event") == "network" and e.get("connections", {}).get(peer) in kinds,
        timeout,
    )
    return str(event["connections"][peer])


def backbone_and_homes(
    lab: NatLab, project: Path, work: Path, *backbone_args: str
) -> tuple[LabProcess, dict[str, LabProcess], dict[str, str]]:
    """A backbone on the public host and a volunteer in each home (h1, h2), started with default
    arguments, each home connected directly to the backbone: the backbone, the homes, and each
    home's peer id. ``backbone_args``: more of the backbone's arguments."""
    aux = LabProcess(
        lab,
        "pub",
        ["backbone", *peer_args(project, work / "aux", "--checkpoint-every", "0"), *backbone_args],
        work / "backbone.log",
    )
    backbone = aux.wait_for(lambda e: e.get("event") == "ready", 120)["address"]
    homes = {
        home: LabProcess(
            lab,
            home,
            ["peer", *peer_args(project, work / home, "--initial-peers", backbone)],
            work / f"{home}.log",
        )
        for home in ("h1", "h2")
    }
    ids = {
        home: proc.wait_for(lambda e: e.get("event") == "ready", 120)["address"].rsplit("/", 1)[-1]
        for home, proc in homes.items()
    }
    aux_id = backbone.rsplit("/", 1)[-1]
    for proc in homes.values():
        assert wait_connected(proc, aux_id, {"direct"}, 120) == "direct"
    return aux, homes, ids
