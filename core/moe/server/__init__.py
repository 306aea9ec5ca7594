"""A volunteer's expert server: hosting experts, answering calls in batches, keeping them safe and
saved, and announcing them in the DHT. Trainers never import this package.

- ``experts``      the expert architectures a project can name (``ffn``, ``linear``) and ExpertSpec,
  which builds a hosted expert (module seeded by its uid, optimizer, shapes).
- ``guard``        what a server refuses so one caller cannot spoil a shared expert: non-finite
  tensors, over-long gradients (clipped), non-finite steps and weights.
- ``backend``      ExpertBackend: one expert's module and optimizer; forward without side effects,
  backward that recomputes activations and updates the expert.
- ``pools``        TaskPool: requests batched per expert and method (max batch size, max wait),
  bounded queues, "busy" when full.
- ``server``       ExpertServer: hosts many backends, answers calls on the Host, runs batches on the
  training thread through the bridge.
- ``receipts``     ReceiptBook: what the server answered each trainer, and each trainer's receipts
  checked against it, the newest kept for the coordinator.
- ``hosted``       HostedExpert: a backend on the server's device that counts the samples it serves
  (``Served``), the unit the engine's ledger counts.
- ``checkpoints``  ExpertCheckpoints (per-expert files, written atomically, the newest readable one
  loaded: takeover) and CheckpointSaver (every N seconds or updates, and at close).
- ``selection``    which uids a server hosts: given uids, globs over the grid, or free slots found in
  the DHT.
- ``events``       what an expert server tells its owner (ready, served, stopped) and their JSON.
- ``runtime``      ExpertHost: a volunteer's expert server built from a ``dmoe`` manifest (Host, DHT,
  bridge, server, announcer, checkpoints), paused and resumed by the engine.
- ``faults``       ServerFaults: injected per-request latency and failures for the experiments.
"""
