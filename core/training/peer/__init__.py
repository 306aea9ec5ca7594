"""The project peer: one process's training, built from a project manifest and composed of parts.

- ``project_peer`` ProjectPeer: builds the network stack, the averager, the state and the role, runs
  it until stopped, and closes them in reverse.
- ``recipe``       the project's model (seeded), optimizer and schedule, tokenizer, data stream,
  loss and averaging settings, from its manifest.
- ``stack``        NetworkStack: a peer's Host, presence and DHT node, started and closed in order;
  roles follow reachability; the ``network`` view and its events.
- ``roles``        TrainerRole (device, data, its mode's optimizer, training loop, the curve) and
  ``run_backbone`` (its mode's backbone, the metrics log and reports, held-out evaluation).
- ``residency``    Residency: the state off the accelerator during a pause, back on resume.
- ``tryout``       ModelTryout: a volunteer's question to the trainer's replica, answered by a CPU
  copy of its weights (taken between microbatches, reused a while) on a thread of its own.
"""
