"""CodecTable: the codecs a process knows, found by name, alias or wire id.

Immutable: ``with_codec`` returns a new table, which ``core.codecs.active.using_codecs`` puts in
force for a block of code.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from core.codecs.spec import Codec


@dataclass(frozen=True)
class CodecTable:
    codecs: tuple[Codec, ...]
    _by_name: Mapping[str, Codec] = field(init=False, repr=False, compare=False)
    _by_wire_id: Mapping[int, Codec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, Codec] = {}
        by_wire_id: dict[int, Codec] = {}
        for codec in self.codecs:
            for name in (codec.name, *codec.aliases):
                if name in by_name:
                    raise ValueError(f"two codecs are called {name!r}")
                by_name[name] = codec
            if codec.wire_id in by_wire_id:
                other = by_wire_id[codec.wire_id].name
                raise ValueError(f"codecs {other} and {codec.name} share wire id {codec.wire_id}")
            by_wire_id[codec.wire_id] = codec
        for codec in self.codecs:
            if codec.picker is not None:
                strangers = [c.name for c in codec.picker.candidates if c not in self.codecs]
                if strangers:
                    raise ValueError(f"codec {codec.name} picks {strangers}, not in the table")
        object.__setattr__(self, "_by_name", MappingProxyType(by_name))
        object.__setattr__(self, "_by_wire_id", MappingProxyType(by_wire_id))

    def __iter__(self) -> Iterator[Codec]:
        return iter(self.codecs)

    def __contains__(self, codec: object) -> bool:
        return codec in self.codecs

    @property
    def names(self) -> tuple[str, ...]:
        """What a manifest may say, in the table's order (aliases are for command lines)."""
        return tuple(codec.name for codec in self.codecs)

    @property
    def concrete(self) -> tuple[Codec, ...]:
        """The codecs that encode by themselves (all but those that pick per tensor)."""
        return tuple(codec for codec in self.codecs if codec.concrete)

    @property
    def for_activations(self) -> tuple[Codec, ...]:
        """What the expert call's wire accepts for activations and gradients."""
        return tuple(codec for codec in self.codecs if codec.activations)

    def parse(self, name: str) -> Codec:
        """The codec called ``name`` (an alias too, in any case); ValueError names the choices."""
        found = self._by_name.get(name.lower())
        if found is None:
            raise ValueError(f"unknown compression {name!r}; use one of {sorted(self._by_name)}")
        return found

    def by_wire_id(self, wire_id: int) -> Codec | None:
        return self._by_wire_id.get(wire_id)

    def with_codec(self, codec: Codec) -> CodecTable:
        """This table and ``codec`` (checked like the others: no name or wire id twice)."""
        return CodecTable((*self.codecs, codec))
