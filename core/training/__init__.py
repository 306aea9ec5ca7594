"""Collaborative training: many peers train one model, as one large-batch run (DeDLOC, the ``dedloc``
mode) or in rounds of local steps (DiLoCo, the ``diloco`` mode, ``diloco/``).

It stands on the torch worker (``core.worker``) and the optimizers (``core.optim``), beside the
mixture-of-experts training (``core.moe``); the model it trains is ``core.models``.

- ``collaborative``  CollaborativeOptimizer: progress, readiness, gradient rounds, state averaging, catch-up.
- ``feedback``       ErrorFeedback: what a sparse codec left out of the gradients, sent next round.
- ``local``          LocalWork: the optimizer's torch work (accumulate, mean gradient, apply, state copies).
- ``progress``       PeerProgress records in the DHT (short-lived, withdrawn on leaving; the
  backbone's carry its newest held-out evaluation, HeldOut), ProgressBoard,
  StepTally (samples, losses and speed since the last report point),
  CollaborationView.
- ``readiness``      how close the collaboration is to the target batch: a pure function of the
  records and the time.
- ``state``          TrainingState: model, optimizer and epoch as flat tensors; the epoch's learning rate.
- ``auxiliary``      AuxiliaryPeer: the backbone; reduces with weight 0, keeps and serves a replica of
  the state (so the model outlives its trainers), aggregates metrics, writes checkpoints.
- ``evidence``       EvidenceBoard: a round's findings signed and published in the DHT (one owned
  subkey per reporter); EvidenceCollector: the backbone reads them once each, to log and report.
- ``call_evidence``  RefusedCalls: an expert server's refused (poisoned) calls as evidence, one
  accusation per caller per window; the backbone's server collects and reports everyone's.
- ``metrics``        per-epoch metrics from everyone's records, and their JSON-lines log.
- ``credit``         Landed epochs in every record, and the CreditBook: each landed epoch of each
  peer credited once, late finds as late credit, a gone peer's share from its round's weights.
- ``curve``          a trainer's ``metrics`` events: the collaboration's epochs from records at hand;
  its ``evaluation`` events: the backbone's held-out figures from its record.
- ``evaluation/``    the backbone's replica measured on held-out text every ``every`` epochs.
- ``checkpoints``    CheckpointStore: atomic, last K kept plus milestones (for rollbacks), never a
  non-finite one.
- ``published``      publish / fetch a checkpoint over HTTP, verified by an index the project key signs;
  the fallback a trainer takes when no peer can give it the state.
- ``published_model`` the model published beside each checkpoint: an exported folder packed into
  ``model-EPOCH.zip`` with a signed ``model.json``; the held-out evaluations each one carries.
- ``published_folder`` the folder both publish into: the file its index named before, and pruning
  the rest.
- ``rollback``       following the moderators' rollback orders: the verified order a replica has
  yet to apply, the last one applied (in snapshots and checkpoints), rollback-aware round names.
- ``rollback_replica`` ReplicaRollback: applying an order to one replica (a peer's rolled-back
  state, else checkpoint N from our store or the published URL), epochs numbered on.
- ``trainer``        Trainer: the training loop (data, forward/backward, fp16 loss scaling, step).
- ``links``          PeerLinks: averager, state sharing, progress board and bridge of one peer.
- ``diloco/``        low-communication training (DiLoCo): rounds of inner steps, a rare exchange of
  pseudo-gradients (sparse, with error feedback), the outer step; the ``diloco`` mode.
- ``peer/``          the project peer: a trainer, client or auxiliary peer built from a manifest.
- ``errors``         CheckpointError (the worker's TrainingError is ``core.worker.errors``).
"""
