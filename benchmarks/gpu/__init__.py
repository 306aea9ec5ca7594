"""The benchmarks the GPU check runs (``packaging/gpu_check.py``), each against its own baseline;
the check and the figures are on ``docs/benchmarks/gpu.md``. On a CPU each has a dry run.

- ``trainer_throughput``  the trainer against a plain PyTorch loop.
- ``memory``              bytes per parameter of 32-bit, 8-bit and offloaded optimizer states.
- ``pause_latency``       a pause until training stopped and memory is given back, and the resume.
- ``precision``           bf16 and fp16 autocast against fp32.
- ``collab``              two trainers sharing the GPU with a CPU backbone.
- ``experts``             the expert host against a plain expert loop.
- ``diloco_inner``        DiLoCo's inner steps against a plain loop, then a round's host copies.
"""
