"""Line plots as PNG files for the benchmarks, drawn with Qt's QPainter (no plotting library).

PySide6 is already a dependency of the GUI, so a benchmark can draw its curves without adding
matplotlib: ``render_panels`` lays out a grid of panels, each with its own axes, ticks, labels and
title, draws every series as a polyline (optionally dashed, with markers and error bars) into a
``QImage`` and saves it. The legend is either one row under the figure's title, shared by every
panel (``shared_legend=True``: the same models in every panel, in the same order and colours), or a
box in a corner of each panel. Qt runs offscreen (``QT_QPA_PLATFORM=offscreen`` unless set
otherwise), so this works on a server without a display; only ``QGuiApplication`` is created, which
text drawing needs.
"""

from __future__ import annotations

import itertools
import math
import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COLORS = ["#1f4e9c", "#d9541a", "#2a9d3a", "#8e3bb5", "#c2185b", "#00838f", "#795548", "#555555"]
"""Line colours in series order: distinguishable, and readable on white."""
LEGEND_CORNERS = ("top-right", "bottom-right", "top-left", "bottom-left", "none")


@dataclass
class Series:
    """One line: a label for the legend and its (x, y) points; ``errors`` are ± bars per point.

    ``color`` overrides the colour of the series' position (``COLORS``).
    """

    label: str
    points: list[tuple[float, float]]
    markers: bool = False
    errors: list[float] | None = None
    color: str | None = None
    dashed: bool = False


@dataclass
class Panel:
    """One plot: its title, axis labels and lines; axis ranges fit the data unless given."""

    title: str
    x_label: str
    y_label: str
    series: list[Series] = field(default_factory=list)
    y_range: tuple[float, float] | None = None
    x_range: tuple[float, float] | None = None
    legend: str = "top-right"
    """Where the panel's own legend goes (one of ``LEGEND_CORNERS``); ignored with a shared one."""


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values (steps of 1, 2 or 5 times a power of ten) in [low, high]."""
    if not math.isfinite(low) or not math.isfinite(high):
        return []
    if high <= low:
        return [low]
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    ticks = []
    value = math.ceil(low / step - 1e-9) * step
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def tick_text(value: float) -> str:
    """A tick label: short, thousands as ``k`` from 10,000."""
    if value == 0:
        return "0"
    if abs(value) >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:.6g}"


def color_of(series: Series, index: int) -> str:
    return series.color or COLORS[index % len(COLORS)]


def _application() -> Any:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    return QGuiApplication.instance() or QGuiApplication([])


def _data_range(panel: Panel) -> tuple[float, float, float, float]:
    xs = [x for s in panel.series for x, _ in s.points]
    ys = [y for s in panel.series for _, y in s.points]
    for s in panel.series:
        for (_, y), error in zip(s.points, s.errors or [], strict=False):
            ys += [y - error, y + error]
    x0, x1 = panel.x_range or ((min(xs), max(xs)) if xs else (0.0, 1.0))
    if panel.y_range:
        y0, y1 = panel.y_range
    else:
        y0, y1 = (min(ys), max(ys)) if ys else (0.0, 1.0)
        pad = 0.05 * (y1 - y0 or abs(y1) or 1.0)
        y0, y1 = y0 - pad, y1 + pad
    if x1 <= x0:
        x1 = x0 + 1.0
    if y1 <= y0:
        y1 = y0 + 1.0
    return x0, x1, y0, y1


def _pen(color: str, width: float, dashed: bool = False) -> Any:
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QColor, QPen

    pen = QPen(QColor(color))
    pen.setWidthF(width)
    if dashed:
        pen.setStyle(Qt.PenStyle.DashLine)
    return pen


def _legend_entry(painter: Any, series: Series, index: int, x: float, y: float) -> float:
    """Draw one legend entry with its line sample at ``(x, y)`` (vertical centre); its width."""
    from PySide6.QtCore import QPointF, QRectF, Qt
    from PySide6.QtGui import QColor

    metrics = painter.fontMetrics()
    painter.setPen(_pen(color_of(series, index), 2.5, series.dashed))
    painter.drawLine(QPointF(x, y), QPointF(x + 22, y))
    painter.setPen(QColor("#000000"))
    width = metrics.horizontalAdvance(series.label)
    painter.drawText(
        QRectF(x + 28, y - metrics.height() / 2, width + 4, metrics.height()),
        Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
        series.label,
    )
    return 28.0 + float(width)


def _draw_panel(
    painter: Any, panel: Panel, box: tuple[int, int, int, int], *, own_legend: bool
) -> None:
    """Draw ``panel`` into ``box`` (left, top, width, height) of the image."""
    from PySide6.QtCore import QPointF, QRectF, Qt
    from PySide6.QtGui import QColor, QFont

    left, top, width, height = box
    font = QFont("DejaVu Sans", 9)
    painter.setFont(font)
    metrics = painter.fontMetrics()
    line = metrics.height()
    # the plotting area, leaving room for the title, tick labels and axis labels
    margin_left = 16 + line + 48
    area = QRectF(left + margin_left, top + 2 * line, width - margin_left - 14, 0)
    area.setHeight(height - 2 * line - (2 * line + 16))
    x0, x1, y0, y1 = _data_range(panel)

    def to_px(x: float, y: float) -> QPointF:
        px = area.left() + (x - x0) / (x1 - x0) * area.width()
        py = area.bottom() - (y - y0) / (y1 - y0) * area.height()
        return QPointF(px, py)

    title_font = QFont("DejaVu Sans", 10)
    title_font.setBold(True)
    painter.setFont(title_font)
    painter.setPen(QColor("#000000"))
    painter.drawText(
        QRectF(left, top + 2, width, 1.5 * line), Qt.AlignmentFlag.AlignCenter, panel.title
    )
    painter.setFont(font)

    grid_pen, axis_pen = _pen("#dddddd", 1), _pen("#333333", 1)
    for value in nice_ticks(x0, x1):
        p = to_px(value, y0)
        painter.setPen(grid_pen)
        painter.drawLine(QPointF(p.x(), area.top()), QPointF(p.x(), area.bottom()))
        painter.setPen(axis_pen)
        painter.drawLine(QPointF(p.x(), area.bottom()), QPointF(p.x(), area.bottom() + 4))
        painter.drawText(
            QRectF(p.x() - 40, area.bottom() + 5, 80, line),
            Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop,
            tick_text(value),
        )
    for value in nice_ticks(y0, y1):
        p = to_px(x0, value)
        painter.setPen(grid_pen)
        painter.drawLine(QPointF(area.left(), p.y()), QPointF(area.right(), p.y()))
        painter.setPen(axis_pen)
        painter.drawLine(QPointF(area.left() - 4, p.y()), QPointF(area.left(), p.y()))
        painter.drawText(
            QRectF(area.left() - 52, p.y() - line / 2, 46, line),
            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
            tick_text(value),
        )
    painter.setPen(axis_pen)
    painter.drawRect(area)
    painter.drawText(
        QRectF(area.left(), area.bottom() + line + 6, area.width(), line),
        Qt.AlignmentFlag.AlignCenter,
        panel.x_label,
    )
    painter.save()
    painter.translate(left + 4, area.center().y())
    painter.rotate(-90)
    painter.drawText(
        QRectF(-area.height() / 2, 0, area.height(), line),
        Qt.AlignmentFlag.AlignCenter,
        panel.y_label,
    )
    painter.restore()

    painter.save()
    painter.setClipRect(area.adjusted(-4, -4, 4, 4))
    for index, series in enumerate(panel.series):
        color = color_of(series, index)
        painter.setPen(_pen(color, 1.8, series.dashed))
        points = [to_px(x, y) for x, y in series.points]
        for a, b in itertools.pairwise(points):
            painter.drawLine(a, b)
        painter.setPen(_pen(color, 1.8))
        for (x, y), error in zip(series.points, series.errors or [], strict=False):
            low, high = to_px(x, y - error), to_px(x, y + error)
            painter.drawLine(low, high)
            painter.drawLine(QPointF(low.x() - 4, low.y()), QPointF(low.x() + 4, low.y()))
            painter.drawLine(QPointF(high.x() - 4, high.y()), QPointF(high.x() + 4, high.y()))
        if series.markers:
            painter.setBrush(QColor(color))
            for p in points:
                painter.drawEllipse(p, 2.8, 2.8)
            painter.setBrush(Qt.BrushStyle.NoBrush)
    painter.restore()

    if own_legend and panel.series and panel.legend != "none":
        box_w = max(metrics.horizontalAdvance(s.label) for s in panel.series) + 40
        box_h = line * len(panel.series) + 8
        x = area.left() + 6 if panel.legend.endswith("left") else area.right() - box_w - 6
        y = area.top() + 6 if panel.legend.startswith("top") else area.bottom() - box_h - 6
        painter.setPen(_pen("#999999", 1))
        painter.setBrush(QColor(255, 255, 255, 230))
        painter.drawRect(QRectF(x, y, box_w, box_h))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        for index, series in enumerate(panel.series):
            _legend_entry(painter, series, index, x + 6, y + 4 + line * index + line / 2)


def render_panels(
    panels: Sequence[Panel],
    *,
    columns: int,
    path: Path,
    title: str = "",
    panel_size: tuple[int, int] = (560, 380),
    shared_legend: bool = False,
) -> None:
    """Draw ``panels`` row by row, ``columns`` per row, under ``title``; write a PNG to ``path``.

    ``shared_legend``: one legend row under the title, from the first panel's series.
    """
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QColor, QFont, QFontMetricsF, QImage, QPainter

    app = _application()
    columns = max(1, columns)
    rows = max(1, math.ceil(len(panels) / columns))
    width, height = panel_size
    title_font = QFont("DejaVu Sans", 11)
    title_font.setBold(True)
    wrap = Qt.AlignmentFlag.AlignHCenter | Qt.TextFlag.TextWordWrap
    title_box = QRectF(8, 6, columns * width - 16, 1000)
    if title:  # wrapped to the image's width: the header grows by a line when it must
        title_box.setHeight(QFontMetricsF(title_font).boundingRect(title_box, wrap, title).height())
    header = int(title_box.height()) + 14 if title else 8
    legend_series = list(panels[0].series) if shared_legend and panels else []
    legend_row = header
    if legend_series:
        header += 24
    image = QImage(columns * width, header + rows * height, QImage.Format.Format_RGB32)
    image.fill(QColor("#ffffff"))
    painter = QPainter(image)
    try:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.TextAntialiasing)
        if title:
            painter.setFont(title_font)
            painter.setPen(QColor("#000000"))
            painter.drawText(title_box, wrap, title)
        if legend_series:
            painter.setFont(QFont("DejaVu Sans", 10))
            metrics = painter.fontMetrics()
            total = sum(28 + metrics.horizontalAdvance(s.label) + 24 for s in legend_series)
            x = max(8.0, (image.width() - total) / 2)
            for index, series in enumerate(legend_series):
                x += _legend_entry(painter, series, index, x, legend_row + 10) + 24
        for index, panel in enumerate(panels):
            row, column = divmod(index, columns)
            _draw_panel(
                painter,
                panel,
                (column * width, header + row * height, width, height),
                own_legend=not legend_series,
            )
    finally:
        painter.end()
    path.parent.mkdir(parents=True, exist_ok=True)
    # PySide6 6.11 refuses bytes here at run time although its stubs ask for them
    if not image.save(str(path), "PNG"):  # type: ignore[call-overload]
        raise OSError(f"could not write the plot to {path}")
    del app  # Qt keeps its application object; nothing to close


def plot_path(explicit: str | None, json_path: str | None, kind: str) -> Path:
    """Where a benchmark part writes its plot: the path asked for, else beside the JSON
    (``out.json`` -> ``out.<kind>.png``), else ``moe_<kind>.png`` here."""
    if explicit is not None:
        return Path(explicit)
    if json_path is not None:
        path = Path(json_path)
        return path.with_name(f"{path.stem}.{kind}.png")
    return Path(f"moe_{kind}.png")


def attach_plot(
    result: dict[str, Any], path: Path, write: Callable[[dict[str, Any], Path], None]
) -> dict[str, Any]:
    """Draw ``result`` to ``path`` and name the file in it (``plot``); a plot that fails keeps the
    measurements, and says why (``plot_error``, and the traceback on stderr)."""
    try:
        write(result, path)
    except Exception as exc:
        traceback.print_exc()
        result["plot"] = None
        result["plot_error"] = f"{type(exc).__name__}: {exc}"
    else:
        result["plot"] = str(path)
    return result
