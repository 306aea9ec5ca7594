"""Exporting a collaborative project's trained model in the Hugging Face ecosystem's format: a
folder that transformers' ``from_pretrained`` loads and the Hub takes as it is.

- ``folder``    ``export_model``: the checks, then ``config.json``, ``model.safetensors``, the
  tokenizer's files and the model card, written into a folder that appears whole; ``Exported``.
- ``kinds``     the model kinds that can be exported, each with its mapping (``mapping_for``).
- ``mapping``   ``KindMapping``: what one kind's export is made of (transformers class, task,
  config, tensor names, a sentence for the card).
- ``albert``    our ``AlbertMLM`` as transformers' ``AlbertForMaskedLM``: config and tensor names.
- ``llama``     our ``LlamaCLM`` as transformers' ``LlamaForCausalLM``: config, and the tensors
  under the names they already have (a tied read-out written once).
- ``weights``   the checkpoint to export (the newest in a folder) and its tensors checked against the
  manifest's model, naming what differs.
- ``tokenizer`` the project's tokenizer found (or downloaded), checked against the embeddings, and
  written with transformers' tokenizer files.
- ``card``      the model card (``README.md``): front matter for the Hub, the project, its data,
  how far it trained, held-out figures, the lines that load it.
- ``records``   what the backbone's work folder says for the card: the held-out figures of the
  checkpoint's epoch (``evaluation.jsonl``), the contributors before it (``metrics.jsonl``).
- ``staging``   the output folder, written aside and renamed into place; never over a folder that
  holds anything unless asked to overwrite.
- ``errors``    ``ExportError``.

The package sits above ``core.training`` (checkpoints, the recipe's model) and ``core.models``, and
loads torch: the command line imports it only when ``barnraise export`` runs. It never imports
transformers, which only the tests use to load what it writes. A dmoe project has no export: its
experts live on the volunteers' servers.
"""
