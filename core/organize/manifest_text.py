"""A manifest as a commented TOML file: every key written, each with a short note on why it matters.

``manifest_text`` writes a manifest that is already built and validated (``core.project``), so the
values are right by construction; the notes are for the organizer who edits the file later. The
writer covers what manifests hold (strings, booleans, integers, finite floats, arrays of them and
``[[data.sources]]``); a key without a note here is still written, bare.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Sequence
from typing import Any

from core.project import AnyManifest, Manifest
from core.util.files.toml_write import scalar_value

WIDTH = 100
"""Longest line; a note that would make a line longer goes on its own line above the key."""
NOTE_COLUMN = 27

SECTION_NOTES = {
    "project": "Who the project is: peers of one project find each other under its name.",
    "model": "The model every peer trains; all peers must agree on every value here.",
    "data": "What trainers read. Relative paths resolve against this file's folder (or against\n"
    "the data base a peer is given: a URL or a folder).",
    "data.sources": "One body of text; sources are mixed in proportion to their weights.",
    "training": "One collaborative step gathers target_batch_size samples from all peers.",
    "averaging": "How peers combine their gradients and states in groups (all-reduce).",
    "network": "How peers and volunteers find the project.",
    "access": "Who may join: 'open', or 'moderated' (volunteers need an account and a pass).",
    "evaluation": "Held-out text, never trained on: the backbone measures the model on it.",
    "grid": "The grid of expert slots; a uid is the prefix and one index per dimension.",
    "expert": "What every expert is; its servers train it on what trainers send.",
    "server": "How volunteers' expert servers announce, batch and checkpoint their experts.",
    "trainer": "How trainers use the grid (Learning@home's mixture-of-experts layer).",
}

KEY_NOTES = {
    "project.name": "1-64 lowercase letters, digits, '-': changing it starts a new swarm",
    "project.kind": "collaborative: one model trained together (DeDLOC); dmoe: hosted experts",
    "project.description": "shown on the project page and to volunteers before they join",
    "model.kind": "albert-mlm: masked language model; llama-clm: predicts the next token",
    "model.vocab_size": "rows of the embedding: at least the tokenizer's vocabulary",
    "model.embedding_size": "ALBERT's factorized embeddings (llama-clm: = hidden_size)",
    "model.hidden_size": "the model's width",
    "model.num_layers": "ALBERT: one shared layer applied this often; llama-clm: layers",
    "model.num_heads": "hidden_size must divide by it",
    "model.num_kv_heads": "llama-clm: key/value heads shared by query heads (0: num_heads)",
    "model.intermediate_size": "the feed-forward block's width",
    "model.max_position": "the longest sample in tokens (at least data.seq_len)",
    "model.rope_theta": "llama-clm: the rotary position embeddings' base",
    "model.tie_embeddings": "true: the read-out reuses the token embedding (fewer parameters)",
    "model.dropout": "albert-mlm: 0 for pretraining (the data keeps it from overfitting)",
    "model.gradient_checkpointing": "true: far less memory per sample for ~1/3 more compute",
    "data.seq_len": "tokens per sample: longer costs attention time and memory",
    "data.shuffle_buffer": "texts held for shuffling on each peer (0: file order)",
    "data.mask_prob": "albert-mlm: share of tokens masked and predicted (BERT's 0.15)",
    "data.tokenizer": "next to this file, or a URL: every peer must load the same one",
    "data.tokenizer_vocab_size": "= model.vocab_size",
    "data.sources.urls": "jsonl, parquet or text shards: paths, file://, http(s):// URLs",
    "data.sources.weight": "how often this source is drawn from, relative to the others",
    "data.sources.format": "auto: from each URL's name (.jsonl.gz, .parquet, .txt, ...)",
    "data.sources.text_field": "the column of jsonl and parquet shards that holds the text",
    "training.target_batch_size": "samples per collaborative step, from all peers together",
    "training.microbatch_size": "samples per forward/backward pass on one peer (its memory)",
    "training.optimizer": "lamb: layer-wise trust ratios tolerate large batches",
    "training.lr": "the learning rate after warmup",
    "training.weight_decay": "decoupled weight decay",
    "training.betas": "the optimizer's moment decay rates",
    "training.eps": "keeps the update finite where a moment is tiny",
    "training.clip_norm": "global gradient norm limit (0: none)",
    "training.warmup_steps": "linear warmup, in collaborative steps (dedloc), rounds' inner steps (diloco)",
    "training.total_steps": "schedule's length: collaborative steps (dedloc), rounds' inner steps (diloco)",
    "training.precision": "auto: bf16/fp16 where the device has it, fp32 on CPUs",
    "training.average_state_every": "steps between averaging parameters and optimizer states",
    "training.delay_parameter_updates": "true: apply each step while the next one computes",
    "training.work_checks": "share of epochs (dedloc) or rounds (diloco) the backbone checks (0.1)",
    "training.seed": "the model's initialization: every peer starts from the same weights",
    "training.optimizer_states": "8bit: ~2 bytes per parameter of states instead of 8",
    "training.offload_optimizer": "true: optimizer states in host memory (small GPUs)",
    "training.mode": "dedloc: average every step; diloco: average once a round (home links)",
    "training.round_seconds": "diloco: seconds of local steps between two exchanges",
    "training.inner_lr": "diloco: inner steps' rate (0: lr x sqrt(microbatch / target batch))",
    "training.outer_lr": "diloco: the outer Nesterov step's learning rate",
    "training.outer_momentum": "diloco: the outer Nesterov step's momentum (0 with topk)",
    "training.overlap": "diloco: true: exchange round r while round r+1 computes",
    "training.residual_decay": "diloco with topk: share of unsent work kept each round (0.95)",
    "averaging.codec": "compression of what peers send (auto: fp16 small, 8-bit large tensors)",
    "averaging.target_group_size": "peers in one averaging group",
    "averaging.min_group_size": "fewest peers a group averages with",
    "averaging.matchmaking_time": "seconds a group waits for members (longer over the internet)",
    "averaging.allreduce_timeout": "seconds before a stuck round is abandoned",
    "averaging.moshpit": "must be false: training averages in one group per round",
    "averaging.density": "topk: the share of values each peer sends (density x rounds >= 1)",
    "averaging.bits": "topk: bits per value sent (2, 4 or 8)",
    "averaging.aggregation": "centered_clip bounds what one wrong or hostile peer can do",
    "averaging.clip_tau": "CenteredClip's radius, relative to the peers' spread",
    "averaging.clip_iterations": "CenteredClip's iterations",
    "averaging.norm_ratio_limit": "parts this many times the median norm are left out",
    "averaging.weight_ratio_limit": "no peer's claimed samples count for more than this times the median",
    "averaging.verify_reducers": "true: members check each other's reducers (costs hashing)",
    "network.initial_peers": "the backbone's DHT node: where volunteers' peers enter the swarm",
    "network.coordinator_url": "the project URL: accounts, passes, the page, the manifest",
    "network.checkpoint_url": "where the backbone's published checkpoints are served (or empty)",
    "network.peer_port": "the TCP port volunteers' peers listen on",
    "network.aux_port": "the backbone's TCP port: open it in the backbone server's firewall",
    "access.mode": "open: anyone trains; moderated: accounts and passes, bans take effect",
    "access.project_key": "the PeerID of project-key.pem: it signs passes and checkpoints",
    "access.backbone_keys": "the PeerID of backbone-key.pem: its word confirms the model's state",
    "access.allow_signup": "true: volunteers create accounts; false: only ones you add",
    "access.pass_lifetime": "seconds an access pass stays valid (renewed at half its life)",
    "access.refresh_interval": "seconds between peers' checks: how fast a ban reaches them",
    "evaluation.urls": "held-out shards (none: no evaluation); same forms as data.sources",
    "evaluation.format": "auto: from each URL's name, as for data.sources",
    "evaluation.text_field": "the column of jsonl and parquet shards that holds the text",
    "evaluation.samples": "sequences measured each time, the same ones every time",
    "evaluation.every": "epochs (diloco: rounds) between two evaluations",
    "grid.prefix": "the grid's name, the first part of every expert's uid",
    "grid.shape": "indices per dimension: their product is the number of experts",
    "expert.kind": "ffn: residual feed-forward block; linear: one layer",
    "expert.hidden": "the experts' input and output width",
    "expert.optimizer": "each expert's own optimizer, one step per backward batch",
    "expert.lr": "the experts' learning rate",
    "expert.max_batch": "samples a server computes at once",
    "expert.max_grad_norm": "longest output gradient one sample may bring; longer ones are clipped",
    "server.announce_ttl": "seconds an announcement lives: a server that left is gone after",
    "server.max_wait": "seconds a lone call waits for a fuller batch",
    "server.max_queue": "samples waiting per expert before callers hear 'busy'",
    "server.checkpoint_interval": "seconds between checkpoints of an expert that learned",
    "server.checkpoint_updates": "also checkpoint after this many updates (0: by time only)",
    "server.keep_checkpoints": "checkpoints kept per expert",
    "server.experts_per_server": "experts a volunteer hosts when none are named",
    "trainer.k": "experts each input is sent to",
    "trainer.k_min": "fewest answers for an input to count",
    "trainer.beam_size": "prefixes the beam search keeps (at least k)",
    "trainer.forward_timeout": "seconds before a silent expert is dropped from the mixture",
    "trainer.backward_timeout": "the same for backward calls",
    "trainer.batch_size": "samples per training step (at most expert.max_batch)",
    "trainer.concurrency": "training steps in flight at once",
    "trainer.lr": "the trainer's own layers' learning rate (the gate's)",
    "trainer.balancing": "weight of the loss that spreads inputs over the experts",
    "data.dataset": "digits: the 8x8 handwritten digits shipped with Barnraise",
}


def manifest_text(manifest: AnyManifest, header: Sequence[str]) -> str:
    """``manifest`` as TOML, every key with its note, under ``header`` (comment lines)."""
    lines = [
        f"# {part}".rstrip()
        for line in header
        for part in textwrap.wrap(line, WIDTH - 2, break_on_hyphens=False) or [""]
    ]
    for section in _sections(manifest):
        name = type(section).KEY
        values = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
        sources = values.pop("sources", None) if isinstance(manifest, Manifest) else None
        lines += ["", *_note(SECTION_NOTES.get(name)), f"[{name}]"]
        lines += [_pair(name, key, value) for key, value in values.items()]
        for source in sources or ():
            key = "data.sources"
            lines += ["", *_note(SECTION_NOTES.get(key)), f"[[{key}]]"]
            for field in dataclasses.fields(source):
                lines.append(_pair(key, field.name, getattr(source, field.name)))
    return "\n".join(lines) + "\n"


def _sections(manifest: AnyManifest) -> list[Any]:
    return [
        getattr(manifest, f.name)
        for f in dataclasses.fields(manifest)
        if dataclasses.is_dataclass(getattr(manifest, f.name))
    ]


def _note(note: str | None) -> list[str]:
    return [] if note is None else [f"# {line}" for line in note.splitlines()]


def _pair(section: str, key: str, value: Any) -> str:
    written = f"{key} = {toml_value(value, f'{section}.{key}')}"
    note = KEY_NOTES.get(f"{section}.{key}")
    if note is None:
        return written
    inline = f"{written:<{NOTE_COLUMN - 2}}  # {note}"
    if len(inline) <= WIDTH:
        return inline
    return f"# {note}\n{written}"


def toml_value(value: Any, where: str) -> str:
    """One TOML value, a list wrapped one item a line when it is long; ``ConfigError`` for what
    would not read back the same."""
    if isinstance(value, tuple | list):
        items = [toml_value(item, where) for item in value]
        flat = "[" + ", ".join(items) + "]"
        if len(flat) <= WIDTH - len(where) or len(items) < 2:
            return flat
        return "[\n" + "".join(f"    {item},\n" for item in items) + "]"
    return scalar_value(value, where)
