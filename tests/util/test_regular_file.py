"""read_regular_file and deeper_than: what a user names is read only if it is a small regular file,
and deep data is measured without recursion."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from core.util.files.regular_file import FileRefused, read_regular_file
from core.util.nesting import deeper_than


def test_regular_files_and_links_to_them_are_read(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_bytes(b"x" * 10)
    assert read_regular_file(path, limit=10) == b"x" * 10
    with pytest.raises(FileRefused, match="is too large"):
        read_regular_file(path, limit=9)
    with pytest.raises(FileRefused, match="is a folder"):
        read_regular_file(tmp_path, limit=10)
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "missing", limit=10)
    if sys.platform != "win32":
        link = tmp_path / "link.toml"
        link.symlink_to(path)
        assert read_regular_file(link, limit=10) == b"x" * 10


@pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and /dev/zero are POSIX")
def test_fifos_and_devices_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(FileRefused, match=r"is a named pipe \(FIFO\), not a regular file"):
        read_regular_file(fifo, limit=10)
    with pytest.raises(FileRefused, match="is a device"):
        read_regular_file(Path("/dev/zero"), limit=10)


def test_nesting_is_measured_without_recursion() -> None:
    assert not deeper_than(1, 0)
    assert not deeper_than({"a": [1, {"b": 2}]}, 3)
    assert deeper_than({"a": [1, {"b": [2]}]}, 3)
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    assert deeper_than(deep, 32)
