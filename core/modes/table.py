"""ModeTable: the training modes a process knows, found by name.

Immutable: ``with_mode`` returns a new table, which ``core.modes.active.using_modes`` puts in
force for a block of code.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from core.modes.spec import ModeSpec


@dataclass(frozen=True)
class ModeTable:
    modes: tuple[ModeSpec, ...]
    _by_name: Mapping[str, ModeSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, ModeSpec] = {}
        for mode in self.modes:
            if mode.name in by_name:
                raise ValueError(f"two training modes are called {mode.name!r}")
            by_name[mode.name] = mode
        if not by_name:
            raise ValueError("a table of training modes needs at least one")
        object.__setattr__(self, "_by_name", MappingProxyType(by_name))

    def __iter__(self) -> Iterator[ModeSpec]:
        return iter(self.modes)

    @property
    def names(self) -> tuple[str, ...]:
        """What a manifest and ``--mode`` may say, in the table's order."""
        return tuple(mode.name for mode in self.modes)

    @property
    def default(self) -> ModeSpec:
        """The first row: a manifest that names no mode trains in it."""
        return self.modes[0]

    def described(self) -> str:
        """Every mode with its summary, for a command's help: "dedloc: ...; diloco: ..."."""
        return "; ".join(f"{mode.name}: {mode.summary}" for mode in self.modes)

    def get(self, name: str) -> ModeSpec | None:
        return self._by_name.get(name)

    def parse(self, name: str) -> ModeSpec:
        """The mode called ``name``; ValueError names the choices."""
        found = self._by_name.get(name)
        if found is None:
            choices = ", ".join(repr(n) for n in self.names)
            raise ValueError(f"unknown training mode {name!r}; use one of {choices}")
        return found

    def with_mode(self, mode: ModeSpec) -> ModeTable:
        """This table and ``mode`` (checked like the others: no name twice)."""
        return ModeTable((*self.modes, mode))
