"""The one error a manifest raises: which file, which key, and why."""

from __future__ import annotations

from pathlib import Path

from core.util.errors import ConfigError


class ManifestError(ConfigError):
    """A project manifest is unreadable or invalid.

    ``key`` is dotted as in the TOML file (``training.target_batch_size``, ``data.sources[1].weight``)
    and empty for problems with the file as a whole; ``line`` is known for syntax errors only.
    """

    def __init__(self, path: Path | None, key: str, reason: str, line: int | None = None) -> None:
        self.path = path
        self.key = key
        self.reason = reason
        self.line = line
        super().__init__(self._message())

    def _message(self) -> str:
        file = str(self.path) if self.path is not None else "<manifest>"
        return f"{file}: {self.key}: {self.reason}" if self.key else f"{file}: {self.reason}"

    def __reduce__(self) -> tuple[type[ManifestError], tuple[Path | None, str, str, int | None]]:
        # the default would call ManifestError(message) when unpickled, which does not fit __init__
        return (type(self), (self.path, self.key, self.reason, self.line))

    def at(self, path: Path | None) -> ManifestError:
        """This error, naming ``path`` if it names no file yet (sections do not know their file)."""
        if self.path is not None or path is None:
            return self
        return ManifestError(path, self.key, self.reason, self.line)

    def under(self, prefix: str, replacement: str) -> ManifestError:
        """This error with its key's ``prefix`` replaced, e.g. ``data.sources`` by ``data.sources[2]``."""
        if self.key != prefix and not self.key.startswith(prefix + "."):
            return self
        key = replacement + self.key[len(prefix) :]
        return ManifestError(self.path, key, self.reason, self.line)
