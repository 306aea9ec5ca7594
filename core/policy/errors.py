"""The policy's own error: preferences that cannot be used, with a message naming the setting."""

from __future__ import annotations

from core.util.errors import ConfigError


class PreferencesError(ConfigError):
    """A preference has the wrong type or is out of range; ``field`` names it when there is one."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
