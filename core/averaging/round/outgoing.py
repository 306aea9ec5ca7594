"""Outgoing: what this member sends of each chunk, read from the caller's tensors.

The transfer asks it for every chunk it sends and for its own input to its own part; a subclass sees
each chunk as it leaves (``feedback``: what a lossy codec left out of it).
"""

from __future__ import annotations

from core.averaging.round.tensors import Span, TensorSet
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
