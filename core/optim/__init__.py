"""Memory-efficient optimizers for consumer GPUs: 8-bit or offloaded states, LAMB and AdamW.

- ``moments``   MomentOptimizer: the Adam moments LAMB and AdamW share, 32-bit or 8-bit (v kept
  as its square root), on the device or offloaded; float views of them for averaging.
- ``quant8``    blockwise dynamic 8-bit quantisation: the code maps, quantise (nearest code via a
  lookup on the float's top bits) and dequantise, on any device.
- ``offload``   Offload: an optimizer update streamed through host memory one parameter at a
  time (pinned buffers and asynchronous copies on CUDA).
- ``lamb``      the LAMB optimizer.
- ``adamw``     AdamW (decoupled weight decay) on LAMB's state scheme, for 8-bit states and offload.
- ``schedule``  the ALBERT learning-rate schedule (warm-up, then linear decay).
- ``outer``     OuterNesterov: DiLoCo's outer step, bit-identical on every CPU.
"""
