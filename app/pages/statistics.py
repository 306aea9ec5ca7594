"""Statistics: the ledger as charts — samples, compute hours and data per day — and the totals.

All from the engine's contribution ledger (this computer only, every project together), by local
day, days without work included so the gaps show. Below them, the active project's model: its
training loss and, where the project's backbone measures it, the loss on held-out text (text no
peer trains on, so it says whether the model learns the language or only its shards) beside the
unigram floor (a dashed line: what a model that only counts words scores there), with the latest
held-out figures; "Try the model": a sentence with a missing word, and the model's
guesses (``TryModelBox``); and "Check my credit": this computer's count of its epochs beside what
the project's coordinator credited (``CreditCheckBox``).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app import wording
from app.engine.store import EngineStore
from app.widgets.charts import BarChart, LineChart
from app.widgets.credit_check import CreditCheckBox
from app.widgets.tiles import StatTile
from app.widgets.try_model import TryModelBox
from core.api.schema import Statistics

PERIODS = ((7, "Last 7 days"), (30, "Last 30 days"), (90, "Last 90 days"))


class StatisticsPage(QWidget):
    def __init__(self, store: EngineStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("page")
        self.store = store
        outer = QVBoxLayout(self)
        outer.setContentsMargins(24, 20, 24, 20)
        top = QHBoxLayout()
        top.addWidget(QLabel("Statistics", objectName="pageTitle"), 1)
        self.period = QComboBox()
        for days, text in PERIODS:
            self.period.addItem(text, days)
        self.period.setCurrentIndex(1)
        self.period.setToolTip("How many days the charts show")
        self.period.setAccessibleName("Period")
        self.refresh = QPushButton("Refresh")
        self.refresh.setToolTip("Read the statistics from the engine now")
        top.addWidget(self.period)
        top.addWidget(self.refresh)
        outer.addLayout(top)
        outer.addWidget(
            QLabel(
                "What this computer contributed, from its own ledger (every project together).",
                objectName="caption",
            )
        )

        tiles = QGridLayout()
        self.samples = StatTile("Samples", "Training examples this computer processed, all time")
        self.compute = StatTile("Compute time", "Time this computer spent training, all time")
        self.sent = StatTile("Data sent", "Bytes sent to other peers, all time")
        self.received = StatTile("Data received", "Bytes received from other peers, all time")
        self.epochs = StatTile("Epochs", "Collaboration steps this computer took part in, all time")
        for i, tile in enumerate(
            (self.samples, self.compute, self.sent, self.received, self.epochs)
        ):
            tiles.addWidget(tile, 0, i)
        outer.addLayout(tiles)

        scroll = QScrollArea(widgetResizable=True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        body = QWidget()
        body.setObjectName("page")
        charts = QVBoxLayout(body)
        charts.setContentsMargins(0, 0, 8, 0)
        self.samples_chart = BarChart(
            "Samples per day", "Training examples this computer processed each day", "samples"
        )
        self.hours_chart = BarChart(
            "Compute hours per day", "Hours this computer spent training each day", "hours"
        )
        self.data_chart = BarChart(
            "Data per day, in MB", "Megabytes sent to and received from other peers each day", "MB"
        )
        for chart in (self.samples_chart, self.hours_chart, self.data_chart):
            charts.addWidget(chart)
        charts.addLayout(self._model_section())
        self.try_model = TryModelBox(store)
        self.credit = CreditCheckBox(store)
        for box in (self.try_model, self.credit):
            charts.addWidget(box)
        scroll.setWidget(body)
        outer.addWidget(scroll, 1)

        self.period.activated.connect(self._period_changed)
        self.refresh.clicked.connect(store.refresh_statistics)
        store.statisticsChanged.connect(self.show_statistics)
        store.historyChanged.connect(self.show_model)
        store.pointAdded.connect(lambda _point: self.show_model())
        if store.statistics is not None:
            self.show_statistics(store.statistics)
        self.show_model()

    def _model_section(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.loss_chart = LineChart(
            "The collaboration's loss",
            "Training loss: the mean loss every peer reports at each completed epoch. Held-out "
            "loss: the model measured by the project's backbone on text no peer trains on. "
            "Lower is better; held-out loss rising while training loss falls means the model "
            "learns its shards by heart. The dashed unigram floor is what a model that only "
            "counts how often each word occurs scores on the held-out text: below it, the model "
            "uses context",
            "epoch",
            "loss",
        )
        self.loss_chart.setMinimumHeight(280)  # room for the legend and the loss axis' labels
        self.held_out = StatTile(
            "Held-out loss",
            "The newest loss of the model on the project's held-out text, the share of tokens it "
            "guessed right, and how far below the unigram floor it is (the loss of a model that "
            "only counts words)",
        )
        self.held_out.setMinimumWidth(170)
        row.addWidget(self.loss_chart, 1)
        row.addWidget(self.held_out, 0, Qt.AlignmentFlag.AlignTop)
        return row

    def show_model(self) -> None:
        """The active project's training and held-out losses, and the newest held-out figures."""
        points, held_out = self.store.history, self.store.held_out
        # the floor is the project's (one held-out text, one count of its words): the newest
        # reported stands for all, older backbones' evaluations having none
        floor = next((e.floor for e in reversed(held_out) if e.floor is not None), None)
        self.loss_chart.set_lines(
            {
                "training loss": ([p.epoch for p in points], [p.loss for p in points]),
                "held-out loss": ([e.epoch for e in held_out], [e.loss for e in held_out]),
            },
            empty="the curve appears after the collaboration's first epoch",
            levels={} if floor is None else {wording.FLOOR_NAME: floor},
        )
        if not held_out:
            self.held_out.set("–", "not measured yet: only projects that keep text apart do")
            return
        newest = held_out[-1]
        loss = "unknown" if newest.loss is None else f"{newest.loss:.3f}"
        caption = f"{100 * newest.accuracy:.1f} % of tokens right, epoch {newest.epoch}"
        beside = wording.beside_floor(newest.loss, newest.floor)
        self.held_out.set(loss, f"{caption}; {beside}" if beside else caption)

    def _period_changed(self, index: int) -> None:
        self.store.statistics_days = int(self.period.itemData(index))
        self.store.refresh_statistics()

    def show_statistics(self, statistics: Statistics) -> None:
        totals, today = statistics.totals, statistics.today
        self.samples.set(wording.count(totals.samples), f"{wording.count(today.samples)} today")
        self.compute.set(
            wording.duration(totals.compute_seconds),
            f"{wording.duration(today.compute_seconds)} today",
        )
        self.sent.set(
            wording.data_size(totals.bytes_sent), f"{wording.data_size(today.bytes_sent)} today"
        )
        self.received.set(
            wording.data_size(totals.bytes_received),
            f"{wording.data_size(today.bytes_received)} today",
        )
        self.epochs.set(wording.count(totals.epochs), f"{totals.rounds:,} averaging rounds")
        days = statistics.days
        labels = [d.day for d in days]
        nothing = "nothing contributed in this period yet"
        self.samples_chart.set_bars(
            labels, {"samples": [d.amounts.samples for d in days]}, empty=nothing
        )
        self.hours_chart.set_bars(
            labels, {"hours": [d.amounts.compute_seconds / 3600 for d in days]}, empty=nothing
        )
        self.data_chart.set_bars(
            labels,
            {
                "sent": [d.amounts.bytes_sent / 1e6 for d in days],
                "received": [d.amounts.bytes_received / 1e6 for d in days],
            },
            empty=nothing,
        )
