"""Low-communication training (DiLoCo): inner steps alone, a rare exchange of what moved.

- ``mode``       ``MODE``: builds a trainer's optimizer and the backbone from a peer's parts.
- ``state``      DilocoState: the outer parameters, their momentum, the error-feedback residual,
  and the round's torch work (inner step, pseudo-gradient, landing, rebasing on a newer anchor).
- ``optimizer``  DilocoOptimizer: rounds, the overlapped exchange, missed rounds; each round it
  took part in told to ``on_landed`` (``Landing``).
- ``groups``     which group of a round each member looks for (a pure rule over the records).
- ``unsent``     UnsentWork and UnsentFile: a trainer's unsent work and samples, kept on disk for its
  restart (on a clean stop, and the residual now and then after a landing).
- ``mend``       Mending: catching up with the collaboration, and repair (a peer that landed a
  round apart from most takes their outer parameters).
- ``late``       Carried: the samples of work not landed yet, credited where it lands, and how late.
- ``checks``     checked rounds: a trainer's round receipts (``RoundLedger``), the backbone's
  replays of them (``RoundChecker``), and how near honest work comes to its replay (``replay``).
- ``backbone``   DilocoBackbone: the backbone's custody of the outer state, each round's members
  scored; its books are ``core.training.bookkeeping``.
"""
