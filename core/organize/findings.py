"""``Finding``: one line of ``barnraise project check``: what was checked, how it went, and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "warning", "error"]
OK: Status = "ok"
WARNING: Status = "warning"
ERROR: Status = "error"


@dataclass(frozen=True)
class Finding:
    status: Status
    what: str
    """The manifest's key or the step: ``manifest``, ``data.sources[0].urls[3]``, ``tokenizer``."""
    message: str

    def to_json(self) -> dict[str, str]:
        return {"status": self.status, "what": self.what, "message": self.message}

    def line(self) -> str:
        return f"{self.status:<8} {self.what}: {self.message}"


def failed(findings: list[Finding]) -> bool:
    """Whether any finding is an error (warnings leave the manifest usable)."""
    return any(finding.status == ERROR for finding in findings)
