"""The manifest of a small dmoe project (a grid of 2 by 2 of tiny experts) for tests of expert servers."""

from __future__ import annotations

MANIFEST = """
[project]
name = "small-dmoe"
kind = "dmoe"
[grid]
prefix = "ffn"
shape = [2, 2]
[expert]
kind = "ffn"
hidden = 8
optimizer = "adam"
lr = 0.01
max_batch = 16
[server]
announce_ttl = 30.0
max_wait = 0.0
max_queue = 64
checkpoint_interval = 0.0
checkpoint_updates = 2
[trainer]
batch_size = 8
"""
