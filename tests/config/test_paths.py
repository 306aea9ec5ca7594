from pathlib import Path

import pytest

from core.config.paths import UserDirs


def test_barnraise_home_moves_everything_under_one_folder(barnraise_home: Path) -> None:
    dirs = UserDirs.default()
    for path in (dirs.config, dirs.data, dirs.cache, dirs.runtime, dirs.logs):
        assert barnraise_home.resolve() in path.parents
    assert dirs.identity_file.name == "identity.key"


def test_platform_directories_when_no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BARNRAISE_HOME", raising=False)
    dirs = UserDirs.default()
    assert "barnraise" in str(dirs.data).lower()
    assert dirs.data != dirs.cache


def test_ensure_creates_private_directories(tmp_path: Path) -> None:
    dirs = UserDirs.under(tmp_path)
    created = dirs.ensure(dirs.data)
    assert created.is_dir()
    assert created.stat().st_mode & 0o077 == 0
