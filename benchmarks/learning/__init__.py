"""What training learns; the figures are on ``docs/benchmarks/learning.md``.

- ``outcome``       held-out loss of the demo models alone against together, in each mode.
- ``diloco_sweep``  DiLoCo's rounds in one process with its settings varied: why it levels off.
- ``lowcomm``       dedloc against diloco (exact and top-k) at equal samples: bytes and loss.
- ``lowcomm_lab``   the same two modes across home links in the NAT lab (root).
"""
