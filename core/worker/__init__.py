"""The torch worker runtime that both kinds of training stand on (DeDLOC's ``core.training`` and
Learning@home's ``core.moe``): where the torch work runs and how the event loop reaches it.

- ``bridge``       TrainingBridge: the one place where the training thread meets the event loop.
- ``gate``         Gate: background torch work (a backbone's replays) waits while the loop does
  what must not be slowed (its own round's exchange). Torch-free.
- ``control``      TrainingControl: carries the scheduler's run / throttle / pause to the loop.
- ``device``       the torch device a trainer computes on ("auto": CUDA, else MPS, else CPU) and why.
- ``accelerator``  the same choice made without torch (NVIDIA driver, Apple silicon, the installed
  torch's build), with its reason: what the engine shows before training starts. Torch-free.
- ``memory``       this computer's RAM and the memory of the GPU a project would train on (psutil,
  NVML; torch only when loaded already). Torch-free.
- ``nvml``         NVIDIA GPUs, driver and CUDA versions, temperature, other programs' use, through
  NVML (optional ``pynvml``), never loading CUDA. Torch-free.
- ``precision``    fp32 / bf16 / fp16 autocast per device, gradient clipping.
- ``events``       PeerEvent: what a peer process tells its owner (ready, epoch, metrics, waiting,
  failed, stopped), typed, with the JSON lines ``barnraise peer`` prints; torch-free, the engine
  reads them.
- ``errors``       TrainingError, and Interrupted (the loop stopped the thread's computation).

This ``__init__`` imports nothing, so that the engine can read ``events`` without loading torch.
"""
