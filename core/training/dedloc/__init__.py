"""The ``dedloc`` mode: many peers train as one large-batch run (DeDLOC).

- ``mode``       ``MODE``: builds a trainer's optimizer and the backbone from a peer's parts.
- ``optimizer``  DedlocOptimizer: readiness, gradient rounds, state averaging, catch-up,
  delayed updates, the moderators' rollbacks.
- ``backbone``   DedlocBackbone: reduces with weight 0, keeps and serves a replica of the state (so
  the model outlives its trainers), spot-checks the trainers' work; its books (metrics, credit,
  evidence, checkpoints) are ``core.training.bookkeeping``.
- ``readiness``  how close the collaboration is to the target batch: a pure function of the
  records and the time.
- ``feedback``   ErrorFeedback: what a sparse codec left out of the gradients, sent next round.
"""
