"""Decentralized mixture-of-experts (Learning@home, Ryabinin and Gusev 2020): volunteers host
experts, trainers find them through the DHT and call them remotely.

- ``grid``         expert uids on a d-dimensional grid ("prefix.i.j"): parsing, prefixes, bounds.
- ``announce``     what servers store in the DHT (uid -> owned address entries, each grid prefix ->
  its active suffixes), the rules that keep strangers from rewriting them, and the refresh task.
- ``gating``       the structured gating function: one linear layer per grid dimension, additive
  scores.
- ``beam_search``  Algorithm 1's beam search over active prefixes, batched across a minibatch, with a
  short cache.
- ``protocol``     the expert call's wire messages and typed errors (busy, unknown expert, bad input).
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
- ``receipts``     receipts for expert work: the trainer's ReceiptSender (running totals per
  server, signed and handed over every few seconds) and the server's ReceiptBook (each receipt
  checked against what it answered that trainer, the newest kept for the coordinator).
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
- ``calls``        ExpertCaller: a trainer's worker thread finds experts and calls many at once
  through the bridge; failure kinds, counters, the failure log, MoEError and TooFewExpertsError.
- ``layer``        RemoteMixtureOfExperts: gate, beam search, remote calls in one autograd Function,
  failed experts excluded and weights renormalised, load-balancing loss.
- ``trainer``      AsyncMoETrainer: several batches in flight on the bridge's workers, steps applied
  one at a time under a lock; DigitsMoE, the demo's model.
- ``digits``       the handwritten digits of the demo: loading, a fixed split, shuffled batches.
- ``trainer_events`` what a DMoE trainer tells its owner (ready, progress, accuracy, stopped) and
  their JSON lines.
- ``training_peer`` MoETrainerPeer: a trainer built from a ``dmoe`` manifest (what ``barnraise peer``
  runs for one): Host, DHT client, beam search, DigitsMoE and the asynchronous trainer.
"""
