"""The decentralized mixture of experts; the figures are on ``docs/benchmarks/moe.md``.

- ``suite``             one run of the parts below, one JSON with a section each.
- ``server``            expert server throughput, ours beside hivemind's (part ``server``).
- ``hivemind_server``   hivemind's side of it, run by hivemind's own interpreter.
- ``beam``              beam-search latency on a simulated DHT of N nodes (part ``beam``).
- ``beam_swarm``        that simulated swarm: wide-area latency, nodes built by joins or directly.
- ``convergence``       Learning@home's Section 4.2 at laptop scale (part ``convergence``).
- ``convergence_runs``  its runs: the feed-forward baseline and the DMoE models.
- ``throughput``        Learning@home's Section 4.1: samples/s under latency (part ``throughput``).
- ``loopback_experts``  expert servers and a trainer on loopback, what both experiments run on.
"""
