"""The root of Barnraise's exception hierarchy.

Every error Barnraise raises on purpose derives from ``BarnraiseError``, so that callers (the CLI, the
control API, the GUI's single error presenter) can tell our clear, user-facing errors from bugs.
"""

from __future__ import annotations


class BarnraiseError(Exception):
    """An expected failure with a message written for the person who will read it."""


class ConfigError(BarnraiseError):
    """A setting, file or argument is invalid; the message says which and why."""


class WireFormatError(BarnraiseError):
    """Data received from elsewhere does not have the shape its type promises."""
