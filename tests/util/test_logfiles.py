"""Every log stays bounded: rotation by size (the same names as logging's), the rotating handler,
a child's output rotated when it starts, and ``metrics.jsonl`` rotated between whole lines."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from core.training.credit.metrics import METRICS_BACKUPS, EpochMetrics, MetricsLog
from core.util.process.detached import start_detached
from core.util.process.logfiles import (
    OUTPUT_MAX_BYTES,
    backup_path,
    rotate_if_over,
    rotated_files,
    rotating_handler,
    stream_is_a_file,
)


def test_a_small_file_stays_and_a_missing_one_is_fine(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    assert rotate_if_over(log, 10, 2) is False
    log.write_text("short")
    assert rotate_if_over(log, 10, 2) is False
    assert log.read_text() == "short"


def test_a_large_file_moves_aside_and_the_oldest_copy_goes(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    for generation in range(4):
        log.write_text(f"generation {generation} " * 3)
        assert rotate_if_over(log, 10, 2) is True
        assert not log.exists()
    assert backup_path(log, 1).read_text().startswith("generation 3")
    assert backup_path(log, 2).read_text().startswith("generation 2")
    assert not backup_path(log, 3).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.log.1", "x.log.2"]
    log.write_text("now")
    assert rotated_files(log, 2) == [backup_path(log, 2), backup_path(log, 1), log]


def test_without_backups_a_large_file_is_removed(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("x" * 20)
    assert rotate_if_over(log, 10, 0) is True
    assert list(tmp_path.iterdir()) == []


def test_the_rotating_handler_keeps_its_size_and_copies(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "engine.log"
    handler = rotating_handler(path, max_bytes=2000, backups=2)
    logger = logging.getLogger("tests.logfiles")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for index in range(200):
            logger.warning("line %d of a log that would grow without bound", index)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        handler.close()
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "engine.log",
        "engine.log.1",
        "engine.log.2",
    ]
    assert all(p.stat().st_size <= 2000 for p in path.parent.iterdir())
    assert "WARNING tests.logfiles: line 199 of a log" in path.read_text()


def test_stderr_redirected_to_a_file_is_told_from_a_pipe(tmp_path: Path) -> None:
    with (tmp_path / "out").open("w") as file:
        assert stream_is_a_file(file)
    with subprocess.Popen([sys.executable, "-c", "pass"], stdout=subprocess.PIPE) as child:
        assert child.stdout is not None
        assert not stream_is_a_file(child.stdout)
    assert not stream_is_a_file(object())


def test_a_childs_output_is_rotated_when_it_starts(tmp_path: Path) -> None:
    output = tmp_path / "logs" / "engine-output.log"
    output.parent.mkdir()
    output.write_bytes(b"o" * OUTPUT_MAX_BYTES)
    child = start_detached(
        [sys.executable, "-c", "print('fresh')"], output=output, header="--- started"
    )
    assert child.wait(30) == 0
    assert output.read_text().splitlines() == ["--- started", "fresh"]
    assert backup_path(output, 1).stat().st_size == OUTPUT_MAX_BYTES
    child = start_detached([sys.executable, "-c", "print('again')"], output=output)
    assert child.wait(30) == 0
    assert output.read_text().splitlines() == ["--- started", "fresh", "again"]  # small: kept


def epoch(index: int) -> EpochMetrics:
    return EpochMetrics(index, 2.5, 128, 40.0, 2, 1000.0 + index, ())


def test_metrics_rotate_between_whole_lines_and_read_back_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("core.training.credit.metrics.METRICS_MAX_BYTES", 500)
    log = MetricsLog(tmp_path / "aux" / "metrics.jsonl")
    for index in range(40):
        log.write(epoch(index))
    files = rotated_files(log.path, METRICS_BACKUPS)
    assert len(files) == METRICS_BACKUPS + 1
    for path in files:  # each one valid JSON lines on its own
        assert all(json.loads(line)["epoch"] >= 0 for line in path.read_text().splitlines())
    kept = [record["epoch"] for record in log.records()]
    assert kept == list(range(kept[0], 40))  # the newest epochs, oldest first, none missing
    assert kept[0] > 0  # the oldest went
    assert all(path.stat().st_size < 500 + 200 for path in files)
