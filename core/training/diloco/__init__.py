"""Low-communication training (DiLoCo): inner steps alone, a rare exchange of what moved.

- ``mode``       ``MODE``: builds a trainer's optimizer and the backbone from a peer's parts.
- ``state``      DilocoState: the outer parameters, their momentum, the error-feedback residual,
  and the round's torch work (inner step, pseudo-gradient, landing, rebasing on a newer anchor).
- ``optimizer``  DilocoOptimizer: rounds, the overlapped exchange, missed rounds, catching up.
- ``unsent``     UnsentWork: a stopped trainer's unsent work and samples, kept for its restart.
- ``backbone``   DilocoBackbone: the auxiliary peer's custody of the outer state, checkpoints.
"""
