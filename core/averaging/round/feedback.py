"""FeedbackOutgoing: what the codec left out of every chunk we send, where the caller wants it.

Error feedback rides on ``Outgoing``, so the transfer never knows of it: each chunk that leaves in a
lossy codec (our own input to our own part too, when it is sparse) puts ``values - decode(encode(values))``
in the matching range of the caller's buffers, which the caller adds to what it averages next time.
Ranges nothing was sent for stay zero.
"""

from __future__ import annotations

import numpy as np

from core.averaging.round.outgoing import Outgoing
from core.averaging.round.tensors import Span, TensorSet
from core.codecs import NONE
from core.codecs.arrays import F32
from core.codecs.chunks import decode


class FeedbackOutgoing(Outgoing):
    def __init__(self, tensors: TensorSet, feedback: TensorSet) -> None:
        """``feedback``: shaped like ``tensors``; zeroed here, before the round."""
        if feedback.sizes != tensors.sizes:
            raise ValueError("feedback tensors must have the shapes of the averaged ones")
        super().__init__(tensors)
        self.feedback = feedback
        for view in feedback.views:
            view[:] = 0.0

    def encoded(self, span: Span) -> bytes | memoryview:
        data = super().encoded(span)
        if span.codec is not NONE:
            self._left_out(span, decode(span.codec, data, span.count))
        return data

    def own(self, span: Span) -> F32:
        values = super().own(span)
        if span.codec.sparse:
            self._left_out(span, values)
        return values

    def _left_out(self, span: Span, sent: F32) -> None:
        np.subtract(self.tensors.view(span), sent, out=self.feedback.view(span))
