"""The loss curve as SVG path data, computed once on the server for the page and for ``/stats``.

The curve lives in a fixed ``WIDTH`` x ``HEIGHT`` view box that the page stretches to its width
(``preserveAspectRatio="none"`` with strokes that do not scale), so the path fits any screen; the
axis labels are HTML beside it, which stays readable on a phone. The held-out loss, measured every
few epochs, shares the plot and its scale: a second, dashed line with a dot at each evaluation. The
unigram floor the backbone reports with it (what a model that only counts words scores on the same
text) is a dotted horizontal line across the plot, inside its scale, so that a curve flattening
onto it reads as a model that learned word counts and nothing more. The script only swaps the path
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
    """First and last epoch drawn (of either line)."""
    losses: tuple[float, float] | None
    """Lowest and highest loss drawn (the bottom and top of the plot, for both lines)."""
    held_out_points: int = 0
    held_out_path: str = ""
    """The held-out loss as a line in the same view box and scale; empty without evaluations."""
    held_out_dots: str = ""
    """A dot at each held-out point: evaluations are sparser than epochs, and a line between two
    of them says nothing about the epochs in between."""
    floor: float | None = None
    """The unigram floor drawn; None without one (or without any line to draw it beside)."""
    floor_path: str = ""
    """The floor as a horizontal line across the view box; empty without one."""

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

    def to_json(self) -> dict[str, object]:
        return {
            "points": self.points,
            "path": self.path,
            "epochs": self.epochs,
            "losses": self.losses,
            "held_out": {
                "points": self.held_out_points,
                "path": self.held_out_path,
                "dots": self.held_out_dots,
            },
            "floor": {"value": self.floor, "path": self.floor_path},
        }


def loss_curve(
    points: Sequence[tuple[float, float]],
    held_out: Sequence[tuple[float, float]] = (),
    floor: float | None = None,
) -> Curve:
    """The curves through (epoch, loss) points of training and of the held-out evaluations,
    oldest first, on one scale, with the unigram ``floor`` as a level line within it."""
    every = [*points, *held_out]
    if not every:
        return Curve(0, "", None, None)
    epochs = [p[0] for p in every]
    losses = [p[1] for p in every] + ([] if floor is None else [floor])
    first, last = min(epochs), max(epochs)
    low, high = min(losses), max(losses)
    if high - low < 1e-9:  # a flat line sits in the middle
        low, high = low - 0.5, high + 0.5
    span_x = (last - first) or 1.0

    def x(epoch: float) -> float:
        return PAD + (epoch - first) / span_x * (WIDTH - 2 * PAD) if last > first else WIDTH / 2

    def y(loss: float) -> float:
        return PAD + (high - loss) / (high - low) * (HEIGHT - 2 * PAD)

    def line(through: Sequence[tuple[float, float]]) -> str:
        if not through:
            return ""
        path = "M" + " L".join(f"{x(e):.1f} {y(v):.1f}" for e, v in through)
        if len(through) == 1:  # a single point: a short stroke, so that it shows
            path += " h0.1"
        return path

    dots = " ".join(f"M{x(e):.1f} {y(v):.1f} h0.1" for e, v in held_out)
    level = "" if floor is None else f"M0 {y(floor):.1f} H{WIDTH:.0f}"
    return Curve(
        len(points),
        line(points),
        (first, last),
        (low, high),
        len(held_out),
        line(held_out),
        dots,
        floor,
        level,
    )


def curve_svg(curve: Curve) -> Markup:
    """The plot: a frame, three grid lines, the unigram floor (``floor-path``), the training loss
    (``id="loss-path"`` for the script) and the held-out loss with its dots (``held-out-path``,
    ``held-out-dots``)."""
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
            id="floor-path",
            class_="floor",
            d=curve.floor_path,
            fill="none",
            vector_effect="non-scaling-stroke",
        ),
        el(
            "path",
            id="loss-path",
            class_="loss",
            d=curve.path,
            fill="none",
            vector_effect="non-scaling-stroke",
            data_points=curve.points,
        ),
        el(
            "path",
            id="held-out-path",
            class_="held-out",
            d=curve.held_out_path,
            fill="none",
            vector_effect="non-scaling-stroke",
            data_points=curve.held_out_points,
        ),
        el(
            "path",
            id="held-out-dots",
            class_="held-out-dots",
            d=curve.held_out_dots,
            fill="none",
            vector_effect="non-scaling-stroke",
        ),
        viewBox=f"0 0 {WIDTH:.0f} {HEIGHT:.0f}",
        preserveAspectRatio="none",
        role="img",
        aria_labelledby="curve-caption",
        class_="curve",
        xmlns="http://www.w3.org/2000/svg",
    )
