"""The benchmarks: scripts that measure the code and write what they find as JSON, each run from the
repository root as ``python -m benchmarks.<room>.<name>`` (``--help`` says what it takes). The rooms
go by subject, and each has a page of figures under ``docs/benchmarks/``:

- ``kit/``       what the scripts share (worker processes, output, plots) and the A/B comparison of
                 two commits (``docs/benchmarks/index.md``).
- ``net/``       connections, streams, the DHT, NATs and relays, access control, the all-reduce
                 (``docs/benchmarks/net.md``).
- ``robust/``    robust aggregation, Byzantine trainers, inflated claims, work checks
                 (``docs/benchmarks/robust.md``).
- ``learning/``  what training learns: held-out loss alone against together, DiLoCo's settings,
                 low-communication modes (``docs/benchmarks/learning.md``).
- ``swarm/``     whole swarms of processes: throughput, DiLoCo at swarm scale, churn
                 (``docs/benchmarks/swarm.md``).
- ``gpu/``       what the GPU check runs: the trainer, memory, precision, pausing, the expert host,
                 DiLoCo's inner steps (``docs/benchmarks/gpu.md``).
- ``moe/``       the decentralized mixture of experts (``docs/benchmarks/moe.md``).
- ``app/``       the desktop app and the engine: start-up, rest, screenshots
                 (``docs/benchmarks/app.md``).
"""
