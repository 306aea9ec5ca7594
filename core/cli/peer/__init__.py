"""``barnraise peer`` and ``barnraise backbone``: one peer of a project, and the backbone's wiring.

- ``command``      the commands' arguments and running: a peer's settings from its options, the
  login to a moderated project, the JSON event lines.
- ``backbone``     the backbone's composition root: what ``barnraise backbone`` adds to a peer's settings
  (its checkpoints published, the model exported beside each, the held-out evaluations kept for
  them, its epochs and evaluations reported to the coordinator).
- ``model_export`` ModelExport: a published checkpoint exported for transformers, packed and signed
  beside it.
- ``dmoe_trainer`` ``barnraise peer`` for a ``dmoe`` project: an asynchronous mixture-of-experts
  trainer.
"""
