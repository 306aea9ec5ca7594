"""Robust aggregation: how a reducer turns its senders' chunks of one part into one chunk.

- ``aggregation``     one chunk from its senders' chunks: screening, then the mean or CenteredClip.
- ``screening``       the cheap checks before aggregating: NaN/infinity, norm far above the group's.
- ``centered_clip``   CenteredClip from the medoid, iterated on the offsets' Gram matrix.
- ``medians``         the medians over a round's senders, each sender counted by its vote (its
  claim, bounded by the typical claim), so that identities that cost nothing cannot set them.
- ``alignment``       how far each sender went along the others' mean (the raw material of diloco's
  scored credit).
"""
