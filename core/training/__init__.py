"""Collaborative training: many peers train one model, as one large-batch run (DeDLOC, the ``dedloc``
mode, ``dedloc/``) or in rounds of local steps (DiLoCo, the ``diloco`` mode, ``diloco/``).

It stands on the torch worker (``core.worker``) and the optimizers (``core.optim``), beside the
mixture-of-experts training (``core.moe``); the model it trains is ``core.models``.

The project's training mode (``core.modes``) decides how its peers train together; each mode is a
sub-package here that builds a trainer's optimizer and the backbone (``mode``); every mode's
trainer takes part in the collaboration the same way (``participation``), and every mode's
backbone keeps the same books (``bookkeeping``).

- ``mode``            Mode: what a mode builds (ModeOptimizer, Backbone) from a peer's parts
  (PeerParts, BackboneParts); ``mode_of`` a manifest loads its mode's code.
- ``participation``   Participation: a trainer's records, pause, waits and state offer, in any mode.
- ``bookkeeping``     Bookkeeping: a backbone's books in any mode (metrics and credit from the
  records, the members' evidence, checkpoints written and published).
- ``dedloc/``         the ``dedloc`` mode: the optimizer, the backbone, readiness, error feedback.
- ``diloco/``         the ``diloco`` mode: rounds of inner steps, a rare exchange of
  pseudo-gradients (sparse, with error feedback), the outer step; catching up and repair
  (``mend``); its backbone.
- ``progress/``       PeerProgress records in the DHT (short-lived, withdrawn on leaving; the
  backbone's carry its newest held-out evaluation), the landed epochs they list, ProgressBoard,
  CollaborationView, StepTally.
- ``credit/``         who is credited what: the credit book, each epoch's metrics and report, the
  samples behind a checkpoint, dedloc's checked work and diloco's work scores.
- ``settings``        PeerSettings (role, listening, data, hooks) and ``Misbehaving``, the seam
  through which the demo makes a trainer misbehave (``core.swarm.byzantine``).
- ``local``           LocalWork: the optimizer's torch work (accumulate, mean gradient, apply,
  state copies).
- ``state``           TrainingState: model, optimizer and epoch as flat tensors; the epoch's
  learning rate.
- ``links``           PeerLinks: averager, state sharing, progress board and bridge of one peer.
- ``curve``           a trainer's ``metrics`` events: the collaboration's epochs from records at
  hand; its ``evaluation`` events: the backbone's held-out figures from its record.
- ``checkpoints``     CheckpointStore: atomic, last K kept plus milestones (for rollbacks), never a
  non-finite one.
- ``rollback_replica`` ReplicaRollback: applying a moderators' order to one replica (a peer's
  rolled-back state, else checkpoint N from our store or the published URL), epochs numbered on.
- ``trainer``         Trainer: the training loop (data, forward/backward, fp16 loss scaling, step).
- ``errors``          CheckpointError (the worker's TrainingError is ``core.worker.errors``).
- ``moderation/``     signed evidence against members (from rounds and from expert calls) and the
  moderators' rollback orders.
- ``publish/``        what the backbone publishes beside its checkpoints for everyone (the checkpoint,
  verified by an index the project key signs; the model exported for transformers), and the
  trainer's fallback that fetches it.
- ``evaluation/``     the backbone's replica measured on held-out text every ``every`` epochs.
- ``peer/``           the project peer: a trainer, client or backbone built from a manifest.
"""
