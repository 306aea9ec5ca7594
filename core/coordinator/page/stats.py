"""The project's live figures: what the page shows and ``GET /stats`` serves as JSON.

Read from the store on each request (a few indexed queries, each curve at most ``MOST_POINTS``
rows): the newest report's loss, speed and live peers, the epoch, all the samples reported, the loss
curve with the held-out loss beside it, the newest held-out evaluation (with where it stands against
the unigram floor, when the backbone reported one), and the leaderboard's top.
Volunteers online and the speed are the newest report's only if it arrived within ``RECENT``
seconds; older, they read 0 and the page says that no report is recent.

The JSON carries the raw values for anyone's tools and, under ``display``, the text of every figure
as the page writes it, which is all the page's script sets (``textContent``, never markup).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from core.coordinator.page import formats
from core.coordinator.page.curve import MOST_POINTS, Curve, loss_curve
from core.coordinator.reports.leaderboard import ACTIVE_WINDOW
from core.coordinator.store import CoordinatorStore
from core.trust.reports import Evaluation

HELD_OUT_FIGURES = ("held_out_loss", "held_out_accuracy", "held_out_when", "held_out_floor")
"""The ``data-figure`` names of the newest held-out evaluation's text."""
RECENT = ACTIVE_WINDOW
"""A report older than this says nothing about who is online now."""
TOP = 10
"""Contributors the project page lists."""


def user_url(name: str) -> str:
    """The path of a user's page (the name percent-encoded: it may hold any letter)."""
    return "/u/" + quote(name, safe="")


@dataclass(frozen=True, slots=True)
class Leader:
    rank: int
    username: str
    samples: int
    compute_seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "username": self.username,
            "samples": self.samples,
            "compute_seconds": self.compute_seconds,
            "url": user_url(self.username),
            "display": {
                "rank": str(self.rank),
                "samples": formats.count(self.samples),
                "compute": formats.compute_time(self.compute_seconds),
            },
        }


@dataclass(frozen=True, slots=True)
class Stats:
    time: float
    epoch: int | None
    """The newest epoch reported."""
    samples: int
    """Every sample the backbone reported, credited to an account or not."""
    loss: float | None
    """The newest report's (None before any, or when it had none)."""
    samples_per_second: float
    volunteers_online: int
    last_report: float | None
    """When the newest report with figures arrived (the coordinator's clock)."""
    recent: bool
    curve: Curve
    leaders: tuple[Leader, ...]
    contributors: int
    """Accounts on the leaderboard."""
    evaluation: Evaluation | None = None
    """The newest held-out evaluation (None before any: the page then says nothing of them)."""

    def display(self) -> dict[str, str]:
        """The text of each figure, by the ``data-figure`` name the page gives its element."""
        if self.last_report is None:
            reported = "no report yet"
        else:
            reported = "last report " + formats.ago(self.time - self.last_report)
        return {
            "epoch": formats.count(self.epoch),
            "samples": formats.count(self.samples),
            "loss": formats.loss(self.loss),
            "samples_per_second": formats.speed(self.samples_per_second),
            "volunteers_online": formats.count(self.volunteers_online),
            "last_report": reported,
            "contributors": formats.count(self.contributors),
            **self.curve.labels(),
            **held_out_display(self.evaluation),
        }

    def to_json(self) -> dict[str, Any]:
        """The JSON of ``/stats``."""
        return {
            "time": self.time,
            "epoch": self.epoch,
            "samples": self.samples,
            "loss": self.loss,
            "samples_per_second": self.samples_per_second,
            "volunteers_online": self.volunteers_online,
            "last_report": self.last_report,
            "recent": self.recent,
            "curve": self.curve.to_json(),
            "evaluation": None if self.evaluation is None else self.evaluation.to_json(),
            "leaderboard": [leader.to_json() for leader in self.leaders],
            "contributors": self.contributors,
            "display": self.display(),
        }


def read_stats(store: CoordinatorStore, now: float) -> Stats:
    latest = store.figures.latest()
    recent = latest is not None and now - latest.received <= RECENT
    speed = alive = None
    if latest is not None and recent:
        speed = latest.figures.samples_per_second
        alive = latest.figures.alive_peers
    _, samples = store.contributions.epoch_totals()
    board = store.leaderboard
    evaluation = store.evaluations.latest()
    leaders = tuple(
        Leader(e["rank"], e["username"], e["samples"], e["compute_seconds"])
        for e in board.top(TOP, now)
    )
    return Stats(
        time=now,
        epoch=store.figures.newest_epoch(),
        samples=samples,
        loss=None if latest is None else latest.figures.loss,
        samples_per_second=speed or 0.0,
        volunteers_online=alive or 0,
        last_report=None if latest is None else latest.received,
        recent=recent,
        curve=loss_curve(
            store.figures.losses(MOST_POINTS),
            store.evaluations.losses(MOST_POINTS),
            None if evaluation is None else evaluation.floor,
        ),
        leaders=leaders,
        contributors=board.totals()["users"],
        evaluation=evaluation,
    )


def held_out_display(evaluation: Evaluation | None) -> dict[str, str]:
    """The text of the newest held-out evaluation's figures (empty before any)."""
    if evaluation is None:
        return dict.fromkeys(HELD_OUT_FIGURES, "")
    return {
        "held_out_loss": formats.loss(evaluation.loss),
        "held_out_accuracy": formats.share(evaluation.accuracy),
        "held_out_when": (
            f"at epoch {evaluation.epoch:,}, on {evaluation.samples:,} held-out "
            f"sequence{'' if evaluation.samples == 1 else 's'}"
        ),
        "held_out_floor": formats.beside_floor(evaluation.loss, evaluation.floor),
    }
