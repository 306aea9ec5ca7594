"""The engine built whole and stopped whole: ``Engine.open`` closes what it opened when a step
fails, ``close`` stops every part even if another fails and says which failed, the daemon passes
that on, and the engine's commands carry the names of the API's calls."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.account import CredentialStore
from core.api import EngineApi
from core.control import EngineDaemon
from core.engine import Closing, Engine, EngineConfig, ShutdownIncomplete
from core.engine.attached import AttachedProjects
from core.engine.parts import EngineParts
from core.scheduler import ConditionSampler, GpuSensor, ScriptedIdleSensor, SystemSensor
from core.stats import Ledger, LedgerError, WorkDone
from core.util.errors import ConfigError
from tests.account.memory_keyring import MemoryKeyring
from tests.support.engine import fast_config
from tests.support.leaks import assert_no_leaks, open_fd_count

NOT_THE_ENGINES = {
    "shutdown": "the daemon's: the server asks it to stop",
    "events": "the stream: the server reads the engine's EventBus (``Engine.events``)",
    "close": "the client's connection; ``Engine.close`` is the engine's own stop",
}


def _api_calls() -> Iterator[str]:
    for name, member in vars(EngineApi).items():
        if callable(member) and not name.startswith("_"):
            yield name


def test_the_engine_has_a_method_for_every_call_it_serves() -> None:
    served = [name for name in _api_calls() if name not in NOT_THE_ENGINES]
    assert {"start", "set_settings", "login", "my_rank"} <= set(served)  # the list is read right
    for name in served:
        method = getattr(Engine, name, None)
        assert callable(method), f"Engine has no {name}() for the API's {name}()"
        wanted = set(inspect.signature(getattr(EngineApi, name)).parameters) - {"self"}
        taken = set(inspect.signature(method).parameters)
        assert wanted <= taken, f"Engine.{name} does not take {wanted - taken}"
    for gone in ("start_contributing", "set_preferences"):
        assert not hasattr(Engine, gone)


class SpySampler(ConditionSampler):
    """A scripted sampler that counts its ``close`` calls."""

    def __init__(self) -> None:
        super().__init__(
            ScriptedIdleSensor(idle_seconds=3600.0), SystemSensor(), GpuSensor(), headless=False
        )
        self.closed = 0

    def close(self) -> None:
        self.closed += 1
        super().close()


async def _open(config: EngineConfig, sampler: ConditionSampler | None = None) -> Engine:
    return await Engine.open(
        config,
        sampler=sampler or SpySampler(),
        credentials=CredentialStore(MemoryKeyring()),
    )


async def test_an_engine_has_every_part_from_the_start(tmp_path: Path) -> None:
    baseline = open_fd_count()
    engine = await _open(fast_config(tmp_path / "home"))
    try:
        for part in (engine.ledger, engine.metering, engine.curve, engine.swarms):
            assert part is not None
        assert engine.ledger.totals(None).samples == 0
    finally:
        await engine.close()
    assert engine.stopped.is_set()
    await assert_no_leaks(baseline)


async def test_a_failure_half_way_through_opening_closes_what_was_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline = open_fd_count()

    async def unreachable(self: AttachedProjects) -> None:
        raise RuntimeError("following the project failed")

    monkeypatch.setattr(AttachedProjects, "follow_active", unreachable)
    sampler = SpySampler()
    closed: list[Ledger] = []
    real_close = EngineParts.close

    def spy_close(self: EngineParts, closing: Closing) -> None:
        closed.append(self.ledger)
        real_close(self, closing)

    monkeypatch.setattr(EngineParts, "close", spy_close)
    with pytest.raises(RuntimeError, match="following the project failed"):
        await _open(fast_config(tmp_path / "home"), sampler)
    assert sampler.closed == 1
    (ledger,) = closed
    with pytest.raises(LedgerError, match="closed"):
        ledger.totals(None)
    await assert_no_leaks(baseline)


async def test_a_damaged_settings_file_stops_the_opening_and_frees_the_sampler(
    tmp_path: Path,
) -> None:
    baseline = open_fd_count()
    config = fast_config(tmp_path / "home")
    config.dirs.ensure(config.dirs.config)
    config.settings_file.write_text("[preferences\n", encoding="utf-8")
    sampler = SpySampler()
    with pytest.raises(ConfigError, match=r"engine\.toml"):
        await _open(config, sampler)
    assert sampler.closed == 1
    assert config.settings_file.read_text(encoding="utf-8") == "[preferences\n"  # untouched
    await assert_no_leaks(baseline)


async def test_close_stops_every_part_and_reports_each_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    baseline = open_fd_count()
    config = fast_config(tmp_path / "home")
    sampler = SpySampler()
    engine = await _open(config, sampler)
    engine.metering.count("barnraise-demo", WorkDone(samples=12))  # not yet in the ledger
    engine.ledger.close()  # stands in for a disk that refuses the last write
    (config.dirs.config / ".engine.toml.part").mkdir()  # the settings cannot be written either
    with pytest.raises(ShutdownIncomplete) as raised:
        await engine.close()
    failures = raised.value.failures
    assert [f.part for f in failures] == [
        "writing the last contribution to the ledger",
        "saving the settings",
    ]
    assert isinstance(failures[0].error, LedgerError)
    assert "engine.toml" in str(failures[1].error)
    assert "may not have been written" in str(raised.value)
    # the other parts were stopped all the same
    assert sampler.closed == 1
    assert engine.stopped.is_set()
    for failure in failures:
        (record,) = [r for r in caplog.records if failure.part in r.getMessage()]
        assert record.levelno == logging.ERROR
        assert record.exc_info is not None
        assert record.exc_info[1] is failure.error
    await assert_no_leaks(baseline)


async def test_the_daemon_reports_what_failed_and_still_lets_the_next_engine_start(
    tmp_path: Path,
) -> None:
    config = fast_config(tmp_path / "home")

    async def daemon() -> EngineDaemon:
        return await EngineDaemon.open(
            config, sampler=SpySampler(), credentials=CredentialStore(MemoryKeyring())
        )

    first = await daemon()
    (config.dirs.config / ".engine.toml.part").mkdir()
    with pytest.raises(ShutdownIncomplete, match="saving the settings failed"):
        await first.stop()
    assert not (config.dirs.runtime / "engine.json").exists()
    await first.stop()  # once only: nothing more to report
    (config.dirs.config / ".engine.toml.part").rmdir()
    second = await daemon()  # the lock was released
    await second.stop()
