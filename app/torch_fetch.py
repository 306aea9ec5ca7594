"""First run of a light bundle: fetch torch, with a progress bar, and say plainly when offline.

The bundle carries no torch (it comes in one build per kind of graphics card, hundreds of megabytes
to gigabytes each); ``barnraise torch install --json`` fetches the one that suits this computer,
in a child process whose lines (``core.api.torch_fetch.FetchProgress``) move the bar here. The app
and the engine keep working meanwhile; the engine finds torch once it is in place. Offline, the
dialog says so and offers to try again; closed early, it asks again at the next start.
"""

from __future__ import annotations

from PySide6.QtCore import QProcess, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QLayout,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from core.api.torch_fetch import FetchProgress, fetch_command

EXPLANATION = (
    "Barnraise trains with PyTorch, which comes in one build for each kind of graphics card. It "
    "is fetching the build for this computer now, once: from about 200 MB (processor only) to a "
    "few GB (NVIDIA graphics cards). You can use the app meanwhile; it starts contributing once "
    "this is done."
)


class TorchFetchDialog(QDialog):
    """Runs the fetch as soon as it is shown; ``ready`` when torch is in place."""

    ready = Signal()

    def __init__(self, parent: QWidget | None = None, command: list[str] | None = None) -> None:
        super().__init__(parent)
        self.command = command or fetch_command()
        self.setWindowTitle("Getting Barnraise ready")
        self.setMinimumWidth(460)
        self.heading = QLabel("Fetching PyTorch for this computer", objectName="pageTitle")
        self.explanation = QLabel(EXPLANATION, wordWrap=True)
        self.status = QLabel("Starting…", wordWrap=True)
        self.status.setAccessibleName("progress")
        self.bar = QProgressBar()
        self.bar.setRange(0, 0)
        self.bar.setTextVisible(True)
        self.buttons = QDialogButtonBox()
        self.retry = QPushButton("Try again")
        self.retry.setVisible(False)
        self.retry.clicked.connect(self.start)
        self.later = QPushButton("Later")
        self.later.setToolTip("Stop for now; Barnraise asks again the next time it starts")
        self.later.clicked.connect(self.reject)
        self.buttons.addButton(self.retry, QDialogButtonBox.ButtonRole.ActionRole)
        self.buttons.addButton(self.later, QDialogButtonBox.ButtonRole.RejectRole)
        layout = QVBoxLayout(self)
        # grow with the words: a failure's sentence is longer than the progress line it replaces
        layout.setSizeConstraint(QLayout.SizeConstraint.SetMinimumSize)
        for widget in (self.heading, self.explanation, self.status, self.bar, self.buttons):
            layout.addWidget(widget)
        self.process: QProcess | None = None
        self.last: FetchProgress | None = None
        self._pending = b""

    def start(self) -> None:
        self.retry.setVisible(False)
        self.later.setText("Later")
        self.status.setObjectName("")
        self._restyle(self.status)
        self.heading.setText("Fetching PyTorch for this computer")
        self.explanation.setVisible(True)
        self.bar.setVisible(True)
        self.bar.setRange(0, 0)
        self.last = None
        self._pending = b""
        process = QProcess(self)
        process.setProcessChannelMode(QProcess.ProcessChannelMode.SeparateChannels)
        process.readyReadStandardOutput.connect(self._read)
        process.finished.connect(self._finished)
        process.errorOccurred.connect(self._could_not_start)
        self.process = process
        process.start(self.command[0], self.command[1:])

    def showEvent(self, event: object) -> None:
        super().showEvent(event)  # type: ignore[arg-type]
        if self.process is None:
            self.start()

    def reject(self) -> None:
        if self.process is not None and self.process.state() != QProcess.ProcessState.NotRunning:
            self.process.finished.disconnect(self._finished)
            self.process.kill()
            self.process.waitForFinished(3000)
        super().reject()

    def show_progress(self, progress: FetchProgress) -> None:
        self.last = progress
        if progress.stage == "failed":
            self._failed(progress)
            return
        if progress.stage == "downloading" and progress.total:
            self.bar.setRange(0, 1000)
            self.bar.setValue(progress.done * 1000 // progress.total)
            mb = progress.total / 1e6
            self.bar.setFormat(f"{progress.package}: %p % of {mb:,.0f} MB")
        elif progress.stage != "downloading":
            self.bar.setRange(0, 0)  # busy: no byte counts at this stage
        self.status.setText(progress.text)
        if progress.stage == "done":
            self.bar.setRange(0, 1)
            self.bar.setValue(1)
            self.bar.setFormat("Ready")
            self.later.setText("Close")

    def _failed(self, progress: FetchProgress) -> None:
        self.bar.setVisible(False)
        self.explanation.setVisible(False)  # the failure's own words say what matters now
        if progress.offline:
            self.heading.setText("You seem to be offline")
            text = (
                f"{progress.text} Barnraise needs to fetch PyTorch once before it can "
                "contribute. Connect to the internet and press Try again; or close this, and "
                "Barnraise will ask again the next time it starts."
            )
        else:
            self.heading.setText("PyTorch could not be fetched")
            text = f"{progress.text} Try again, or see the app's log for details."
        self.status.setText(text)
        self.status.setObjectName("inlineError")
        self._restyle(self.status)
        self.retry.setVisible(True)
        self.later.setText("Close")
        self.adjustSize()

    def _read(self) -> None:
        assert self.process is not None
        self._pending += bytes(self.process.readAllStandardOutput().data())
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            progress = FetchProgress.read_line(line.decode("utf-8", "replace"))
            if progress is not None:  # else a stray line (a warning): not for the bar
                self.show_progress(progress)

    def _finished(self, code: int, _status: QProcess.ExitStatus) -> None:
        self._read()
        if self.last is not None and self.last.stage == "done":
            self.ready.emit()
            return
        if self.last is None or self.last.stage != "failed":
            assert self.process is not None
            said = bytes(self.process.readAllStandardError().data()).decode("utf-8", "replace")
            words = said.strip().splitlines()[-1:] or [f"It stopped with status {code}."]
            self._failed(FetchProgress("failed", words[0]))

    def _could_not_start(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart:
            self._failed(FetchProgress("failed", f"Could not start {self.command[0]}."))

    @staticmethod
    def _restyle(widget: QWidget) -> None:
        widget.style().unpolish(widget)
        widget.style().polish(widget)
