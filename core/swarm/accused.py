"""The backbone's accusations, as ``barnraise swarm`` shows them.

The backbone names every peer the members accuse of misbehaving (``core.training.dedloc.backbone``: one
``evidence: peer <PeerID> …`` line in its log per accused peer and round). Those lines go to the
backbone's log, not to its stdout, so the swarm follows the log (``LogTail``) and passes them
on with the swarm's own name for the peer (``peer-2``) and, for a trainer started with
``--byzantine``, the fact that it misbehaves on purpose: the demo shows both what was done and who
the defences caught. A peer accused in every round would drown the epoch lines, so after its first
accusation at most one line per ``REPEAT_SECONDS`` is shown for it, with how many came meanwhile.
``Accusations`` also tallies them for the lines printed when the swarm stops, so that an honest
peer accused now and then stands out next to the one accused every round.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from core.util.clock import SYSTEM_CLOCK, Clock

EVIDENCE = re.compile(r"evidence: peer (?P<peer>[1-9A-HJ-NP-Za-km-z]{20,80})\b")
"""What the backbone writes for each accusation (``core.training.moderation.evidence.accusations``)."""
REPEAT_SECONDS = 30.0
"""After a peer's first accusation, at most one line for it this often."""
MAX_LINE = 64 * 1024
"""A longer "line" is not one of the backbone's: it is dropped, not held."""


class LogTail:
    """The complete lines appended to a file since it was opened here (its start: ``offset``)."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self._partial = b""

    @classmethod
    def at_end(cls, path: Path) -> LogTail:
        """From the file's current end (what was there before this run is not ours)."""
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        return cls(path, size)

    def new_lines(self) -> list[str]:
        """Lines completed since the last call; none when the file is missing or shrank (rotated
        or replaced: it is read again from its start)."""
        try:
            with self.path.open("rb") as file:
                size = file.seek(0, 2)
                if size < self.offset:
                    self.offset, self._partial = 0, b""
                file.seek(self.offset)
                data = file.read(size - self.offset)
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *complete, rest = (self._partial + data).split(b"\n")
        self._partial = rest if len(rest) <= MAX_LINE else b""
        return [line.decode("utf-8", "replace").rstrip("\r") for line in complete]


class Accusations:
    """Accusation lines told apart by peer, with the swarm's names for the peers it started."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.names: dict[str, str] = {}
        """PeerID -> the swarm's name for that peer (``peer-0``)."""
        self.byzantine: set[str] = set()
        """PeerIDs of the peers started to misbehave."""
        self.counts: Counter[str] = Counter()
        self._clock = clock
        self._shown: dict[str, tuple[float, int]] = {}
        """PeerID -> when its last line was shown, and its count then."""

    def started(self, name: str, peer: str, *, byzantine: bool) -> None:
        self.names[peer] = name
        if byzantine:
            self.byzantine.add(peer)

    def read(self, line: str) -> str | None:
        """The accusation in ``line`` to show, from ``evidence:`` on, with the peer's name added;
        None when the line is not one, or when one for the same peer was shown too recently."""
        found = EVIDENCE.search(line)
        if found is None:
            return None
        peer = found["peer"]
        self.counts[peer] += 1
        now, count = self._clock.monotonic(), self.counts[peer]
        last = self._shown.get(peer)
        if last is not None and now - last[0] < REPEAT_SECONDS:
            return None
        self._shown[peer] = (now, count)
        text = line[found.start() :]
        who = self.who(peer)
        if who is not None:
            text = text.replace(peer, f"{peer} [{who}]", 1)
        if last is not None and count - last[1] > 1:
            text += f" (and {count - last[1] - 1} more since the last line shown)"
        return text

    def who(self, peer: str) -> str | None:
        name = self.names.get(peer)
        if name is None:
            return None
        return f"{name}, misbehaving on purpose" if peer in self.byzantine else name

    def summary(self) -> list[str]:
        """One line per accused peer, the most accused first (empty when nobody was)."""
        lines = []
        for peer, count in self.counts.most_common():
            who = self.who(peer) or "not started by this swarm"
            lines.append(f"{peer} [{who}]: named in {count} accusation(s)")
        return lines
