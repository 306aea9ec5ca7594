"""Whole swarms of processes; the figures are on ``docs/benchmarks/swarm.md``.

- ``demo``         the demo swarm's throughput against plain single-process training.
- ``swarm_scale``  DiLoCo with more trainers than a group: bytes, landing, slow devices, churn, a
                   poisoner.
- ``churn``        the churn soak: volunteers come and go, the collaboration goes on.
"""
