"""SingleInstance: one app window per user; starting the app again brings the open one forward.

A local socket named after the user's engine endpoint (so two users, or two ``BARNRAISE_HOME``s,
each get their own). The second app connects, says "show", and exits. On Unix the socket is a file
in the temporary folder; an app killed without quitting leaves it behind, and the next launch with
the same key (or ``remove_stale``) deletes it.
"""

from __future__ import annotations

import hashlib

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket


def socket_name(key: str) -> str:
    """The local socket's name for ``key``: short, and the same in every launch."""
    return "barnraise-" + hashlib.sha256(key.encode()).hexdigest()[:20]


def remove_stale(key: str) -> None:
    """Delete the socket an app with ``key`` left behind when it was killed without quitting."""
    QLocalServer.removeServer(socket_name(key))


class SingleInstance(QObject):
    activated = Signal()
    """Another launch asked this app to show itself."""

    def __init__(self, key: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = socket_name(key)
        self._server: QLocalServer | None = None

    def claim(self) -> bool:
        """True: we are the only app (and now listen); False: another one was told to show."""
        probe = QLocalSocket()
        probe.connectToServer(self.name)
        if probe.waitForConnected(500):
            probe.write(b"show\n")
            probe.flush()
            probe.waitForBytesWritten(500)
            probe.disconnectFromServer()
            return False
        QLocalServer.removeServer(self.name)  # a name left behind by a crashed app
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        if not server.listen(self.name):
            return True  # cannot guard: run anyway rather than refuse to open
        server.newConnection.connect(self._on_connection)
        self._server = server
        return True

    def _on_connection(self) -> None:
        assert self._server is not None
        while (socket := self._server.nextPendingConnection()) is not None:
            socket.readyRead.connect(lambda s=socket: self._read(s))
            socket.disconnected.connect(socket.deleteLater)

    def _read(self, socket: QLocalSocket) -> None:
        if bytes(socket.readAll().data()).strip() == b"show":
            self.activated.emit()

    def release(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
