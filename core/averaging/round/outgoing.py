"""Outgoing: what this member sends of each chunk, read from the caller's tensors.

The transfer asks it for every chunk it sends and for its own input to its own part, and tells it of
every averaged chunk before its mean replaces our values; a subclass sees each chunk as it leaves and
as its mean lands (``feedback``: what of ours the round's result does not hold).
"""

from __future__ import annotations

from core.averaging.round.tensors import Span, TensorSet
from core.codecs import NONE
from core.codecs.arrays import F32
from core.codecs.chunks import decode, encode


class Outgoing:
    def __init__(self, tensors: TensorSet) -> None:
        self.tensors = tensors

    def encoded(self, span: Span) -> bytes | memoryview:
        """The chunk as it goes to its reducer, in its codec."""
        return encode(span.codec, self.tensors.view(span))

    def own(self, span: Span) -> F32:
        """Our own input to a chunk of the part we reduce, as the reducer takes it.

        In a sparse codec it is as sparse as everyone's: the mean then fits the codec it goes back
        in, and what is left out waits for the next round like theirs. Otherwise the values
        themselves (a view, nothing copied)."""
        values = self.tensors.view(span)
        if span.codec.sparse:
            return decode(span.codec, encode(span.codec, values), span.count)
        return values

    @property
    def settles(self) -> bool:
        """Whether ``landing`` needs a chunk's mean before it replaces our values (the transfer
        then decodes a coded mean apart first, rather than straight into the tensor)."""
        return False

    def landing(self, span: Span, mean: F32, included: bool, screened: bool) -> None:
        """A chunk's ``mean`` is about to replace our values (still in the tensor); ``included``:
        whether our data is in it; ``screened``: whether the reducer's screens left it out."""


def coded(span: Span) -> bool:
    """The chunk's mean comes back coded (not raw float32)."""
    return span.returned is not NONE
