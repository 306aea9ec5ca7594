"""One round of the all-reduce: planned before it starts, then carried out chunk by chunk.

The plan decides; the transfer moves bytes as the plan says and calls hooks at fixed points, so that
what a round does besides (verification, ``core.averaging.verified``) is wrapped around it; error
feedback rides on what the transfer sends.

- ``plan``            RoundPlan and plan_round: parts, reducers, chunks, codecs, weights, roles.
- ``transfer``        Transfer: sending our chunks, reducing our part, sending and receiving averages.
- ``hooks``           RoundHooks: the points where a round may do more than move bytes (no-ops here).
- ``outgoing``        Outgoing: what this member sends of each chunk.
- ``feedback``        FeedbackOutgoing: what the codec left out of each chunk we send (error feedback).
- ``columns``         Columns: a round of several groups, each slot averaged across the groups' reducers.
- ``reducer``         PartReducer: aggregating one part chunk by chunk, excluding senders that fail
                      or that the checks screen out, and recording findings.
- ``tensors``         TensorSet (in-place float32 views) and the chunk layout.
- ``load_balancing``  the DeDLOC linear program and whole-element part sizes.
- ``checks``          VerificationConfig, what verified reducers' findings are called, and which
                      parts each member checks after a round (``core.averaging.verified``).
"""
