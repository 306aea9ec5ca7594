"""The models a project trains, apart from how they are trained.

- ``albert``  AlbertMLM: the ALBERT-style masked language model (demo to xxlarge), with optional
  gradient checkpointing of its shared layer.
- ``llama``   LlamaCLM: a decoder-only causal language model of the Llama family's shape (RMSNorm,
  rotary embeddings, grouped-query attention, SwiGLU), whose state dict loads into transformers'
  LlamaForCausalLM; optional gradient checkpointing per layer.
- ``checks``  the size checks every model configuration makes, worded alike.
"""
