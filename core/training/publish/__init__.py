"""What the backbone publishes for everyone beside its checkpoints, and how a trainer fetches it.

- ``checkpoint``  publish / fetch a checkpoint over HTTP, verified by an index the project key
  signs; the fallback a trainer takes when no peer can give it the state.
- ``model``       the model published beside each checkpoint: an exported folder packed into
  ``model-EPOCH.zip`` with a signed ``model.json``; the held-out evaluations each one carries.
- ``folder``      the folder both publish into: the file its index named before, and pruning the
  rest.
"""
