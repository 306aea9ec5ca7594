"""The trainer's side of a mixture of experts: finding experts, calling them, and training with them.
It reaches servers only through the wire (``core.moe.protocol``, ``core.moe.remote``), never their
code.

- ``gating``       the structured gating function: one linear layer per grid dimension, additive
  scores.
- ``beam_search``  Algorithm 1's beam search over active prefixes, batched across a minibatch, with a
  short cache.
- ``calls``        ExpertCaller: a trainer's worker thread finds experts and calls many at once
  through the bridge; failure kinds, counters, the failure log, MoEError and TooFewExpertsError.
- ``receipts``     ReceiptSender: running totals per server of the work it answered, signed and
  handed over every few seconds.
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
