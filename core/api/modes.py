"""The table of training modes (``core.modes``), named here because the app reaches ``core`` only
through ``core.api``: the dashboard asks it whether the active project's mode has rounds on the
shared clock (``Rounds.mode``), and how that mode trains, in words for volunteers."""

from core.modes import ModeSpec, active_modes

__all__ = ["ModeSpec", "active_modes"]
