"""One round of the all-reduce: the reducers, the tensors and their chunks, and who reduces how much.

- ``reducer``         PartReducer: aggregating one part chunk by chunk, excluding senders that fail
                      or that the checks screen out, and recording findings.
- ``tensors``         TensorSet (in-place float32 views) and the chunk layout.
- ``load_balancing``  the DeDLOC linear program and whole-element part sizes.
"""
