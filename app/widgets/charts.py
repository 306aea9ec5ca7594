"""LineChart and BarChart: the two QtCharts views the pages need, with empty states that say why.

Both are read-only pictures; each carries an accessible description with the numbers it shows (a
chart says nothing to a screen reader otherwise) and a tooltip explaining what it plots.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from PySide6.QtCharts import (
    QBarSeries,
    QBarSet,
    QCategoryAxis,
    QChart,
    QChartView,
    QLineSeries,
    QValueAxis,
)
from PySide6.QtCore import QMargins, QPointF, Qt
from PySide6.QtGui import QColor, QCursor, QPainter, QPen
from PySide6.QtWidgets import QToolTip, QWidget

from app import wording
from app.theme import ACCENT, MUTED

SERIES_COLOURS = (ACCENT, "#3b6ea8", "#c98a0b")


class _Chart(QChartView):
    def __init__(self, title: str, explanation: str, parent: QWidget | None = None) -> None:
        chart = QChart()
        chart.setTitle(title)
        chart.legend().hide()
        chart.setMargins(QMargins(4, 4, 4, 4))
        chart.setBackgroundRoundness(6)
        super().__init__(chart, parent)
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setToolTip(explanation)
        self.setAccessibleName(title)
        self.setMinimumHeight(200)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # a picture: nothing to operate
        self.empty_text = ""

    def _reset(self) -> QChart:
        chart = self.chart()
        chart.removeAllSeries()
        for axis in chart.axes():
            chart.removeAxis(axis)
        return chart

    def _say_empty(self, text: str) -> None:
        self.empty_text = text
        self.chart().setTitle(f"{self.accessibleName()} — {text}")
        self.setAccessibleDescription(text)


class LineChart(_Chart):
    def __init__(
        self,
        title: str,
        explanation: str,
        x_title: str,
        y_title: str,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(title, explanation, parent)
        self.x_title, self.y_title = x_title, y_title
        self.count = 0
        self.lines: dict[str, list[tuple[float, float]]] = {}
        """The points drawn, by line (lines without any left out)."""
        self.levels: dict[str, float] = {}
        """The level lines drawn across the plot, by name (none while no line is drawn)."""

    def set_points(self, xs: Sequence[float], ys: Sequence[float | None], *, empty: str) -> None:
        self.set_lines({self.y_title: (xs, ys)}, empty=empty)

    def set_lines(
        self,
        lines: Mapping[str, tuple[Sequence[float], Sequence[float | None]]],
        *,
        empty: str,
        levels: Mapping[str, float] | None = None,
    ) -> None:
        """Named lines of (x, y) on the same axes, a legend naming them when more than one is
        drawn; a y of None is a gap. The first is the main line (``count`` is its points); the
        others are measurements at some x only, so their points show where they were taken.
        ``levels``: named y values drawn as dashed horizontal lines across the plot (a reference,
        such as the loss of a model that knows nothing of context), within the y range; only
        beside a line: alone they are no curve."""
        chart = self._reset()
        drawn: dict[str, list[tuple[float, float]]] = {}
        for index, (name, (xs, ys)) in enumerate(lines.items()):
            pairs = [(float(x), float(y)) for x, y in zip(xs, ys, strict=True) if y is not None]
            if index == 0:
                self.count = len(pairs)
            if pairs:
                drawn[name] = pairs
        self.lines = drawn
        self.levels = {name: float(y) for name, y in (levels or {}).items()} if drawn else {}
        if not drawn:
            self._say_empty(empty)
            return
        self.empty_text = ""
        chart.setTitle(self.accessibleName())
        x_axis, y_axis = QValueAxis(), QValueAxis()
        x_axis.setTitleText(self.x_title)
        y_axis.setTitleText(self.y_title)
        x_axis.setLabelFormat("%d")
        y_axis.setLabelFormat("%.2f")
        every = [pair for pairs in drawn.values() for pair in pairs]
        low_x, high_x = min(x for x, _ in every), max(x for x, _ in every)
        x_axis.setRange(low_x, high_x if high_x > low_x else low_x + 1)
        heights = [y for _, y in every] + list(self.levels.values())
        low, high = min(heights), max(heights)
        pad = (high - low) * 0.08 or 0.5
        y_axis.setRange(low - pad, high + pad)
        x_axis.applyNiceNumbers()
        y_axis.applyNiceNumbers()
        for axis, side in (
            (x_axis, Qt.AlignmentFlag.AlignBottom),
            (y_axis, Qt.AlignmentFlag.AlignLeft),
        ):
            axis.setLabelsColor(QColor(MUTED))
            chart.addAxis(axis, side)
        dashed = QPen(QColor(MUTED), 1.5, Qt.PenStyle.DashLine)
        styles = [
            (name, drawn[name], QPen(QColor(colour), 2), index > 0)
            for index, (name, colour) in enumerate(zip(lines, SERIES_COLOURS, strict=False))
            if name in drawn
        ] + [
            # across the whole plot, the axis' rounded ends included
            (name, [(x_axis.min(), level), (x_axis.max(), level)], dashed, False)
            for name, level in self.levels.items()
        ]
        for name, pairs, pen, dotted in styles:
            series = QLineSeries()
            series.setName(name)
            series.setPen(pen)
            series.setPointsVisible(dotted)
            series.replace([QPointF(x, y) for x, y in pairs])
            chart.addSeries(series)
            series.attachAxis(x_axis)
            series.attachAxis(y_axis)
        chart.legend().setVisible(len(styles) > 1)
        chart.legend().setAlignment(Qt.AlignmentFlag.AlignBottom)
        self.setAccessibleDescription(self._description())

    def _description(self) -> str:
        """The numbers drawn, for a screen reader."""
        if list(self.lines) == [self.y_title] and not self.levels:
            (pairs,) = self.lines.values()
            last_x, last_y = pairs[-1]
            return (
                f"{len(pairs)} points; latest {self.y_title} {last_y:.3f} at {self.x_title} "
                f"{last_x:.0f}"
            )
        return "; ".join(
            [
                f"{name}: {len(pairs)} points, latest {pairs[-1][1]:.3f} at {self.x_title} "
                f"{pairs[-1][0]:.0f}"
                for name, pairs in self.lines.items()
            ]
            + [f"{name}: {level:.3f}" for name, level in self.levels.items()]
        )


class BarChart(_Chart):
    """Bars per day; the day labels follow the space (a week: "Mon 16"; a month: "16" upright;
    longer: the range in the title), and hovering a bar shows its day and exact value."""

    def __init__(
        self, title: str, explanation: str, unit: str, parent: QWidget | None = None
    ) -> None:
        super().__init__(title, explanation, parent)
        self.unit = unit
        self.days: list[str] = []
        self.series: dict[str, list[float]] = {}
        self.divisor = 1.0

    def set_bars(
        self, days: Sequence[str], series: dict[str, Sequence[float]], *, empty: str
    ) -> None:
        """``days``: ISO dates, oldest first; ``series``: one value per day each."""
        chart = self._reset()
        self.days = list(days)
        self.series = {name: list(values) for name, values in series.items()}
        if not days or not any(any(v > 0 for v in vs) for vs in series.values()):
            self._say_empty(empty)
            return
        self.empty_text = ""
        top = max(max(vs) for vs in series.values())
        self.divisor, scaled = _scale(top)
        title = f"{self.accessibleName()}, {scaled}" if scaled else self.accessibleName()
        chart.setTitle(title)
        bars = QBarSeries()
        for colour, (name, values) in zip(SERIES_COLOURS, series.items(), strict=False):
            bar_set = QBarSet(name)
            bar_set.setColor(QColor(colour))
            bar_set.setBorderColor(QColor(colour))
            bar_set.append([float(v) / self.divisor for v in values])
            bars.append(bar_set)
        bars.hovered.connect(self._hovered)
        chart.addSeries(bars)
        chart.legend().setVisible(len(series) > 1)
        chart.legend().setAlignment(Qt.AlignmentFlag.AlignBottom)
        x_axis = _day_axis(self.days)
        x_axis.setLabelsColor(QColor(MUTED))
        y_axis = QValueAxis()
        y_axis.setLabelsColor(QColor(MUTED))
        y_axis.setRange(0, top / self.divisor * 1.1)
        y_axis.applyNiceNumbers()
        y_axis.setLabelFormat("%.0f" if top / self.divisor >= 10 else "%.1f")
        chart.addAxis(x_axis, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(y_axis, Qt.AlignmentFlag.AlignLeft)
        bars.attachAxis(x_axis)
        bars.attachAxis(y_axis)
        totals = ", ".join(
            f"{name} total {sum(vs):,.1f} {self.unit}" for name, vs in series.items()
        )
        self.setAccessibleDescription(f"{len(days)} days; {totals}")

    def describe_bar(self, index: int) -> str:
        """ "Mon 16 Nov: 5,320,114 samples"; with several series, each named: "…: sent 12.5 MB,
        received 20 MB"."""
        day = wording.day_label(self.days[index], month=True)

        def number(value: float) -> str:
            return f"{value:,.1f}".removesuffix(".0")

        if len(self.series) == 1:
            (values,) = self.series.values()
            return f"{day}: {number(values[index])} {self.unit}"
        parts = [f"{name} {number(vs[index])} {self.unit}" for name, vs in self.series.items()]
        return f"{day}: " + ", ".join(parts)

    def _hovered(self, status: bool, index: int, _bar_set: QBarSet) -> None:
        if status:
            QToolTip.showText(QCursor.pos(), self.describe_bar(index), self)
        else:
            QToolTip.hideText()


def _scale(top: float) -> tuple[float, str]:
    """Plot thousands or millions rather than "8054648" on an axis."""
    if top >= 2e6:
        return 1e6, "in millions"
    if top >= 2e4:
        return 1e3, "in thousands"
    return 1.0, ""


def _day_axis(days: list[str]) -> QCategoryAxis:
    """An x axis with a label under some bars: every day for a week ("Mon 16"), else about eight
    evenly spaced dates ("16 Nov"). Bars sit at 0, 1, 2 …; labels are not bound to a bar's width."""
    axis = QCategoryAxis()
    axis.setRange(-0.5, len(days) - 0.5)
    axis.setLabelsPosition(QCategoryAxis.AxisLabelsPosition.AxisLabelsPositionOnValue)
    axis.setGridLineVisible(False)
    if len(days) <= 8:
        marks = list(range(len(days)))
    else:
        step = -(-len(days) // 8)
        marks = list(range(len(days) - 1, -1, -step))[::-1]  # the last day always labelled
    for index in marks:
        day = days[index]
        label = wording.day_label(day) if len(days) <= 8 else wording.short_date(day)
        axis.append(label, index)
    return axis
