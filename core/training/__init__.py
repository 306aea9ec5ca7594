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
- ``evidence``       EvidenceBoard: a round's findings signed and published in the DHT (one owned
  subkey per reporter); EvidenceCollector: the backbone reads them once each, to log and report.
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
- ``albert``         AlbertMLM: the ALBERT-style masked language model (demo to xxlarge), with
  optional gradient checkpointing of its shared layer.
- ``lamb``           the LAMB optimizer; ``schedule``: the ALBERT learning-rate schedule.
- ``adamw``          AdamW (decoupled weight decay) on LAMB's state scheme, for 8-bit states and offload.
- ``moments``        MomentOptimizer: the Adam moments LAMB and AdamW share, 32-bit or 8-bit (v kept
  as its square root), on the device or offloaded; float views of them for averaging.
- ``quant8``         blockwise dynamic 8-bit quantisation: the code maps, quantise (nearest code via a
  lookup on the float's top bits) and dequantise, on any device.
- ``offload``        Offload: an optimizer update streamed through host memory one parameter at a
  time (pinned buffers and asynchronous copies on CUDA).
- ``precision``      fp32 / bf16 / fp16 autocast per device, gradient clipping.
- ``device``         the torch device a trainer computes on ("auto": CUDA, else MPS, else CPU) and why.
- ``accelerator``    the same choice made without torch (NVIDIA driver, Apple silicon, the installed
  torch's build), with its reason: what the engine shows before training starts. Torch-free.
- ``nvml``           NVIDIA GPUs, driver and CUDA versions, temperature, other programs' use, through
  NVML (optional ``pynvml``), never loading CUDA. Torch-free.
- ``checkpoints``    CheckpointStore: atomic, last K kept plus milestones (for rollbacks), never a
  non-finite one.
- ``published``      publish / fetch a checkpoint over HTTP, verified by an index the project key signs.
- ``rollback``       following the moderators' rollback orders: the verified order a replica has
  yet to apply, the last one applied (in snapshots and checkpoints), rollback-aware round names.
- ``rollback_replica`` ReplicaRollback: applying an order to one replica (a peer's rolled-back
  state, else checkpoint N from our store or the published URL), epochs numbered on.
- ``byzantine``      a peer that misbehaves on purpose (gradients x1000, sign-flipped x10, noise, NaN,
  a lying reducer): how the demo's ``--byzantine``, the tests and the benchmark show the defences.
- ``errors``         TrainingError, CheckpointError.

This ``__init__`` imports nothing, so that the engine can read ``events`` without loading torch.
"""
