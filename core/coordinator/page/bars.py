"""A user's samples per day as SVG bars (their page's history), drawn on the server.

Like the loss curve, the bars fill a fixed view box that stretches to the page's width; each bar
carries a ``<title>`` (its day and samples) and the day labels are HTML under it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.coordinator.page import formats
from core.coordinator.page.html import Markup, el

WIDTH = 300.0
HEIGHT = 80.0
GAP = 0.2
"""Of each day's slot, the part left empty between bars."""


def history_svg(days: Sequence[dict[str, Any]]) -> Markup:
    """Bars of ``days`` (``leaderboard.history``: ``day``, ``samples``), oldest first."""
    most = max((int(day["samples"]) for day in days), default=0)
    slot = WIDTH / max(len(days), 1)
    bars = []
    for i, day in enumerate(days):
        samples = int(day["samples"])
        height = HEIGHT * samples / most if most else 0.0
        if samples and height < 1.0:  # a day with any work shows
            height = 1.0
        bars.append(
            el(
                "rect",
                el("title", f"{day['day']}: {formats.count(samples)} samples"),
                x=f"{i * slot + slot * GAP / 2:.2f}",
                y=f"{HEIGHT - height:.2f}",
                width=f"{slot * (1 - GAP):.2f}",
                height=f"{height:.2f}",
                class_="bar",
            )
        )
    return el(
        "svg",
        el("title", "Samples per day"),
        el(
            "line",
            x1=0,
            x2=int(WIDTH),
            y1=int(HEIGHT),
            y2=int(HEIGHT),
            class_="grid",
            vector_effect="non-scaling-stroke",
        ),
        bars,
        viewBox=f"0 0 {WIDTH:.0f} {HEIGHT:.0f}",
        preserveAspectRatio="none",
        role="img",
        aria_label="Samples per day",
        class_="bars",
        xmlns="http://www.w3.org/2000/svg",
    )
