"""Collaborative training (DeDLOC): many peers train one model as one large-batch run.

- ``collaborative``  CollaborativeOptimizer: progress, readiness, gradient rounds, state averaging, catch-up.
- ``local``          LocalWork: the optimizer's torch work (accumulate, mean gradient, apply, state copies).
- ``progress``       PeerProgress records in the DHT (short-lived, withdrawn on leaving), ProgressBoard,
  CollaborationView.
- ``readiness``      how close the collaboration is to the target batch: a pure function of the
  records and the time.
- ``state``          TrainingState: model, optimizer and epoch as flat tensors; the epoch's learning rate.
- ``auxiliary``      AuxiliaryPeer: the backbone; reduces with weight 0, keeps and serves a replica of
  the state (so the model outlives its trainers), aggregates metrics, writes checkpoints.
- ``metrics``        per-epoch metrics from everyone's records, and their JSON-lines log.
- ``curve``          a trainer's ``metrics`` events: the collaboration's epochs from records at hand.
- ``trainer``        Trainer: the training loop (data, forward/backward, fp16 loss scaling, step).
- ``bridge``         TrainingBridge: the one place where the training thread meets the event loop.
- ``control``        TrainingControl: carries the scheduler's run / throttle / pause to the loop.
- ``links``          PeerLinks: averager, state sharing, progress board and bridge of one peer.
- ``runtime``        ProjectPeer: a trainer, client or auxiliary peer built from a project manifest.
- ``events``         PeerEvent: what a peer tells its owner (ready, epoch, metrics, waiting, failed,
  stopped),
  typed, with the JSON lines ``barnraise peer`` prints; torch-free, the engine reads them.
- ``albert``         AlbertMLM: the demo's small ALBERT-style masked language model.
- ``lamb``           the LAMB optimizer; ``schedule``: the ALBERT learning-rate schedule.
- ``precision``      fp32 / bf16 / fp16 autocast per device, gradient clipping.
- ``device``         the torch device a trainer computes on ("auto": CUDA, else MPS, else CPU) and why.
- ``accelerator``    the same choice made without torch (NVIDIA driver, Apple silicon, the installed
  torch's build), with its reason: what the engine shows before training starts. Torch-free.
- ``nvml``           NVIDIA GPUs, driver and CUDA versions, temperature, other programs' use, through
  NVML (optional ``pynvml``), never loading CUDA. Torch-free.
- ``checkpoints``    CheckpointStore: atomic, last K kept, never a non-finite one.
- ``published``      publish / fetch a checkpoint over HTTP, verified by an index the project key signs.
- ``errors``         TrainingError, CheckpointError.

This ``__init__`` imports nothing, so that the engine can read ``events`` without loading torch.
"""
