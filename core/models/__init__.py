"""The models a project trains, apart from how they are trained.

- ``albert``  AlbertMLM: the ALBERT-style masked language model (demo to xxlarge), with optional
  gradient checkpointing of its shared layer.
"""
