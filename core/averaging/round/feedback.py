"""FeedbackOutgoing: what of our values the round's result does not hold, where the caller wants it.

Error feedback rides on ``Outgoing``, so the transfer never knows of it. Each chunk that leaves in a
lossy codec (our own input to our own part too, when it is sparse) puts ``values - decode(encode(values))``
in the matching range of the caller's buffers, which the caller adds to what it averages next time.
When the chunk's mean lands, what it does not hold of ours goes back in whole: every value, when the
reducer left our data out because it came late (or not at all); the values at the positions the mean
dropped, when a sparse mean keeps only its largest values (``core.codecs.topk.MEAN_FAN_IN``). So a
value we sent either reached the result or waits in the buffers for a later round, never both.
A chunk the reducer's screens left out (its norm far above the group's) is the exception: what we
sent of it is dropped, and only what the codec kept back waits. Sent again it would be screened
again, a little larger each round (the new work adds to it while the others' shrink as the loss
flattens), until the screens' repeats sign evidence against an honest member.
A chunk that did not land keeps our own values in the tensor, and its range here says only what the
codec dropped: the caller knows from ``AveragingResult.missing`` which ranges those are.
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

    @property
    def settles(self) -> bool:
        return True

    def landing(self, span: Span, mean: F32, included: bool, screened: bool) -> None:
        values, left = self.tensors.view(span), self.feedback.view(span)
        if screened:
            return  # the buffers hold what the codec kept back of the chunk, and nothing else
        if not included:
            left[:] = values
            return
        # where the mean holds nothing, nothing of ours landed: a position we sent that the mean
        # dropped comes back whole (one we did not send holds all of its value already)
        np.copyto(left, values, where=mean == 0)

    def _left_out(self, span: Span, sent: F32) -> None:
        np.subtract(self.tensors.view(span), sent, out=self.feedback.view(span))
