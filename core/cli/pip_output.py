"""Reading pip's output as progress, and telling "offline" from other failures, without I/O.

``barnraise torch install`` runs pip with ``--progress-bar raw`` (pip 24.1 and later), which writes
``Progress DONE of TOTAL`` lines for each download beside its usual ``Collecting``, ``Downloading
NAME (SIZE)`` and ``Installing collected packages`` lines; ``PipOutput.feed`` turns each line into a
``FetchProgress`` (or None for lines that say nothing new). ``offline_reason`` reads pip's failure
for the marks of an index that could not be reached at all.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from core.api.torch_fetch import FetchProgress

_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)\s*$")
_DOWNLOADING = re.compile(r"^\s*Downloading (\S+?)(?: \(([^)]*)\))?\s*$")
_COLLECTING = re.compile(r"^\s*Collecting (\S+)")
_PROCESSING = re.compile(r"^\s*Processing (\S+)")
_INSTALLING = re.compile(r"^\s*Installing collected packages: (.+)$")

_UNREACHABLE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Name or service not known",
    "Temporary failure in name resolution",
    "nodename nor servname",
    "getaddrinfo failed",
    "Network is unreachable",
    "Connection refused",
    "ConnectTimeoutError",
    "No route to host",
    "ProxyError",
)
"""What pip (urllib3) says when it never reached the index."""


def package_of(filename: str) -> str:
    """``torch`` from ``torch-2.13.0+cpu-cp311-...whl`` (a wheel's name ends at its first dash)."""
    name = filename.rsplit("/", 1)[-1]
    return name.split("-", 1)[0].replace("_", "-")


class PipOutput:
    """Feed it pip's lines in order; it remembers which file is downloading."""

    def __init__(self) -> None:
        self.package = ""
        self.lines: list[str] = []

    def feed(self, line: str) -> FetchProgress | None:
        line = line.rstrip("\r\n")
        if line.strip():
            self.lines = [*self.lines[-40:], line]
        if match := _PROGRESS.match(line):
            done, total = int(match[1]), int(match[2])
            return FetchProgress("downloading", self._downloading(), self.package, done, total)
        if match := _DOWNLOADING.match(line):
            self.package = package_of(match[1])
            size = f" ({match[2]})" if match[2] else ""
            return FetchProgress("downloading", f"Downloading {self.package}{size}", self.package)
        if match := _COLLECTING.match(line):
            return FetchProgress("checking", f"Looking for {match[1]}", package_of(match[1]))
        if match := _PROCESSING.match(line):
            name = package_of(match[1])
            return FetchProgress("checking", f"Using {name} from {match[1]}", name)
        if match := _INSTALLING.match(line):
            count = len([p for p in match[1].split(",") if p.strip()])
            return FetchProgress("installing", f"Unpacking {count} package(s)")
        return None

    def _downloading(self) -> str:
        return f"Downloading {self.package}" if self.package else "Downloading"

    def last_error(self) -> str:
        """pip's own words for its failure: its last ``ERROR:`` line, else its last line."""
        errors = [line for line in self.lines if line.startswith("ERROR:")]
        chosen = errors[-1] if errors else (self.lines[-1] if self.lines else "pip failed")
        return chosen.removeprefix("ERROR:").strip()


def offline_reason(lines: list[str], index_url: str | None) -> str | None:
    """Words for an index that was never reached, or None when pip failed otherwise."""
    text = "\n".join(lines)
    if not any(mark in text for mark in _UNREACHABLE):
        return None
    return unreachable_words(index_url)


def unreachable_words(index_url: str | None) -> str:
    host = urlsplit(index_url).hostname if index_url else "pypi.org"
    return (
        f"Could not reach {host or index_url}: this computer seems to be offline, or a firewall "
        "or proxy blocks it."
    )
