"""Decentralized mixture-of-experts (Learning@home, Ryabinin and Gusev 2020): volunteers host
experts, trainers find them through the DHT and call them remotely.

- ``grid``         expert uids on a d-dimensional grid ("prefix.i.j"): parsing, prefixes, bounds.
- ``announce``     what servers store in the DHT (uid -> address, each grid prefix -> its active
  suffixes, with expirations) and the task that refreshes it.
- ``gating``       the structured gating function: one linear layer per grid dimension, additive
  scores.
- ``beam_search``  Algorithm 1's beam search over active prefixes, batched across a minibatch, with a
  short cache.
- ``protocol``     the expert call's wire messages and typed errors (busy, unknown expert, bad input).
- ``experts``      the expert architectures a project can name (``ffn``, ``linear``) and ExpertSpec,
  which builds a hosted expert (module seeded by its uid, optimizer, shapes).
- ``backend``      ExpertBackend: one expert's module and optimizer; forward without side effects,
  backward that recomputes activations and updates the expert.
- ``pools``        TaskPool: requests batched per expert and method (max batch size, max wait),
  bounded queues, "busy" when full.
- ``server``       ExpertServer: hosts many backends, answers calls on the Host, runs batches on the
  training thread through the bridge.
"""
