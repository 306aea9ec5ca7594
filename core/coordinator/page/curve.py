"""The loss curve as SVG path data, computed once on the server for the page and for ``/stats``.

The curve lives in a fixed ``WIDTH`` x ``HEIGHT`` view box that the page stretches to its width
(``preserveAspectRatio="none"`` with strokes that do not scale), so the path fits any screen; the
axis labels are HTML beside it, which stays readable on a phone. The script only swaps the path
data and the labels' text that ``/stats`` brings: it never computes geometry or builds markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.coordinator.page.html import Markup, el

WIDTH = 600.0
HEIGHT = 200.0
PAD = 8.0
"""Room at the edges, so that the line's ends and extremes are not cut by the frame."""
MOST_POINTS = 400
"""Epochs beyond this are averaged in spans (``figures.Figures.losses``)."""


@dataclass(frozen=True, slots=True)
class Curve:
    points: int
    path: str
    """SVG path data in the view box; empty without points."""
    epochs: tuple[float, float] | None
    """First and last epoch drawn."""
    losses: tuple[float, float] | None
    """Lowest and highest loss drawn (the bottom and top of the plot)."""

    def labels(self) -> dict[str, str]:
        """The axis labels' text, by the ``data-figure`` name the page gives each."""
        if self.epochs is None or self.losses is None:
            return {"curve_top": "", "curve_bottom": "", "curve_first": "", "curve_last": ""}
        return {
            "curve_top": f"{self.losses[1]:.4g}",
            "curve_bottom": f"{self.losses[0]:.4g}",
            "curve_first": f"epoch {self.epochs[0]:,.0f}",
            "curve_last": f"epoch {self.epochs[1]:,.0f}",
        }


def loss_curve(points: Sequence[tuple[float, float]]) -> Curve:
    """The curve through (epoch, loss) points, oldest first."""
    if not points:
        return Curve(0, "", None, None)
    epochs = [p[0] for p in points]
    losses = [p[1] for p in points]
    first, last = epochs[0], epochs[-1]
    low, high = min(losses), max(losses)
    if high - low < 1e-9:  # a flat line sits in the middle
        low, high = low - 0.5, high + 0.5
    span_x = (last - first) or 1.0

    def x(epoch: float) -> float:
        return PAD + (epoch - first) / span_x * (WIDTH - 2 * PAD) if last > first else WIDTH / 2

    def y(loss: float) -> float:
        return PAD + (high - loss) / (high - low) * (HEIGHT - 2 * PAD)

    steps = [f"{x(e):.1f} {y(v):.1f}" for e, v in points]
    path = "M" + " L".join(steps)
    if len(points) == 1:  # a single point: a short stroke, so that it shows
        path += " h0.1"
    return Curve(len(points), path, (first, last), (low, high))


def curve_svg(curve: Curve) -> Markup:
    """The plot: a frame, three grid lines and the path (``id="loss-path"`` for the script)."""
    grid = [
        el(
            "line",
            x1=0,
            x2=int(WIDTH),
            y1=f"{level:.1f}",
            y2=f"{level:.1f}",
            class_="grid",
            vector_effect="non-scaling-stroke",
        )
        for level in (PAD, HEIGHT / 2, HEIGHT - PAD)
    ]
    return el(
        "svg",
        el("title", "Loss per epoch"),
        grid,
        el(
            "path",
            id="loss-path",
            class_="loss",
            d=curve.path,
            fill="none",
            vector_effect="non-scaling-stroke",
            data_points=curve.points,
        ),
        viewBox=f"0 0 {WIDTH:.0f} {HEIGHT:.0f}",
        preserveAspectRatio="none",
        role="img",
        aria_labelledby="curve-caption",
        class_="curve",
        xmlns="http://www.w3.org/2000/svg",
    )
