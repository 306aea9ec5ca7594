"""FakeConnector: hands the supervisor a ``FakeEngine`` instead of a real one.

For the GUI tests, the screenshot script and ``barnraise app --preview`` (the app with sample data
and no engine, to look at it or to try it out).
"""

from __future__ import annotations

from core.api.protocol import EngineApi
from core.api.testing import FakeEngine


class FakeConnector:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.launches = 0

    async def find(self) -> EngineApi | None:
        return None if self.engine.shut_down else self.engine

    async def launch(self) -> EngineApi:
        self.launches += 1
        self.engine.shut_down = False  # a fake engine "starts" again when asked
        return self.engine

    async def exit_status(self) -> int | None:
        return 0 if self.engine.shut_down else None

    def describe_logs(self) -> str:
        return "the fake engine keeps no log"
