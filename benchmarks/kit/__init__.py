"""What the benchmarks share, and the A/B comparison of two commits (``docs/benchmarks/index.md``).

- ``harness``     worker processes driven over pipes, the hivemind reference run, ``emit`` (JSON
                  out), the GPU benchmarks' device option and masked-LM batches.
- ``measuring``   percentiles, latency summaries, CPU time of a process tree and of the machine.
- ``plot_png``    line plots as PNG files, drawn with Qt (no plotting library).
- ``compare``     two commits' transport, DHT, all-reduce and demo swarm figures, runs alternated.
"""
