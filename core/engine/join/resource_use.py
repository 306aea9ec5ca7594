"""What joining a project would use on this computer, estimated from its manifest alone.

Shown in a project URL's preview (``ProjectPreview.uses``) before the user joins, so it is worked
out without torch (the engine starts torch-free) and without the data: closed formulas over the
manifest's numbers, rough by nature and said to be so in the notes.

- **Parameters**: a collaborative project's model counted as its module builds it: an ALBERT as
  ``core.models.albert`` (factorized embeddings, one encoder layer shared by every depth, the
  decoder tied to the token embeddings), a Llama-shaped causal model as ``core.models.llama``
  (a layer per depth, grouped-query attention, the read-out tied or not); a dmoe project's experts
  this computer would host (``server.experts_per_server`` of ``core.moe.server.experts``' kind and
  width). Tests keep the formulas equal to torch's count.
- **Memory**: the weights (fp32) and the optimizer's state (``training_state``), which
  ``memory_fit`` measures against this computer's memory before anything is built; for a dmoe
  project, those of the experts one server hosts.
- **Disk**: what a volunteer's peer writes. A trainer keeps no checkpoints of its own (the
  backbone does), but fetches the organizers' published checkpoint once when it finds nobody to
  load the state from (``network.checkpoint_url``), and copies the tokenizer; the data is
  streamed, never cached. An expert server keeps ``server.keep_checkpoints`` checkpoints of each
  expert it hosts, with its optimizer's moments.
- **Network per hour**: a trainer's traffic is its averaging, which its training mode estimates
  (``ModeSpec.traffic`` in ``core.modes``) from what is known here: the model's size, the values a
  state round moves (the parameters and the optimizer's moments), this computer's speed (the
  model's training FLOPs per sample over an effective FLOP rate of the device), a swarm assumed
  to be ``ASSUMED_PEERS`` computers like this one, the codec's rough bytes per value (its spec's,
  ``core.codecs``) and ``MIN_ROUND_SECONDS``. In dedloc mode that is an all-reduce of the
  gradients every epoch and of the state every ``training.average_state_every`` epochs; in
  diloco mode one exchange of the pseudo-gradient a round, however fast the device (within a few
  per cent of the measured round, ``docs/benchmarks/learning/lowcomm-round-bytes.json``). Neither counts
  the one download of the state when joining, nor the DHT's small records. An expert server's
  traffic is the trainers' calls, estimated at ``ASSUMED_SAMPLES_PER_EXPERT`` samples a second to
  each hosted expert (forward and backward, inputs and outputs of ``expert.hidden`` floats).
"""

from __future__ import annotations

from core.api.schema import ResourceUse
from core.modes import TrafficInputs, active_modes
from core.project import DmoeManifest, Manifest
from core.project.kinds import AnyManifest
from core.project.sections import LLAMA_CLM
from core.util.amounts import count_text, size_text

ASSUMED_PEERS = 10
"""The swarm a collaborative estimate assumes: this many computers like this one."""
MIN_ROUND_SECONDS = 10.0
"""An epoch never takes less than its matchmaking plus this (the all-reduce itself)."""
ASSUMED_SAMPLES_PER_EXPERT = 100.0
"""Samples a second the trainers send each hosted expert (a dmoe estimate)."""
EFFECTIVE_FLOPS = {"cuda": 8e12, "mps": 1.5e12, "cpu": 4e10}
"""FLOP/s a training step gets out of each kind of device, in practice (well below the peak)."""
MOMENTS = {"lamb": 2, "adam": 2, "adamw": 2, "sgd": 1}
"""Optimizer state per parameter, in values of the parameter's size."""
TOKENIZER_BYTES = 2 * 1024 * 1024
"""A tokenizer file, about (a WordPiece vocabulary of tens of thousands of entries)."""


def albert_parameters(manifest: Manifest) -> int:
    """The ALBERT model's trainable values, shared and tied weights counted once."""
    m = manifest.model
    v, e, h, i, p = (
        m.vocab_size,
        m.embedding_size,
        m.hidden_size,
        m.intermediate_size,
        m.max_position,
    )
    embeddings = v * e + p * e + 2 * e + (e * h + h)  # tokens, positions, norm, projection up
    attention = (h * 3 * h + 3 * h) + (h * h + h) + 2 * h  # qkv, out, norm
    feed_forward = (h * i + i) + (i * h + h) + 2 * h  # in, out, norm
    head = (h * e + e) + 2 * e + v  # dense, norm, the decoder's bias (its weight is tied)
    return embeddings + attention + feed_forward + head


def llama_parameters(manifest: Manifest) -> int:
    """The Llama-shaped model's trainable values, a tied read-out counted once."""
    m = manifest.model
    v, h, i = m.vocab_size, m.hidden_size, m.intermediate_size
    kv = m.kv_heads * (h // m.num_heads)  # the width of the key and of the value projection
    attention = 2 * h * h + 2 * h * kv  # q and o, k and v (no biases)
    feed_forward = 3 * h * i  # gate, up, down
    layer = attention + feed_forward + 2 * h  # and its two RMSNorm weights
    read_out = 0 if m.tie_embeddings else h * v
    return v * h + m.num_layers * layer + h + read_out  # embedding, layers, final norm, read-out


def model_parameters(manifest: Manifest) -> int:
    """The collaborative project's model's trainable values, whatever its kind."""
    if manifest.model.kind == LLAMA_CLM:
        return llama_parameters(manifest)
    return albert_parameters(manifest)


def _flops_per_token(manifest: Manifest) -> int:
    """Multiply-adds of the model's weights per token, every depth counted (training: 6 of each)."""
    m = manifest.model
    h, i, v = m.hidden_size, m.intermediate_size, m.vocab_size
    if m.kind == LLAMA_CLM:
        kv = m.kv_heads * (h // m.num_heads)
        return m.num_layers * (2 * h * h + 2 * h * kv + 3 * h * i) + h * v
    # the shared layer counted at every depth, the embedding projections, the decoder's read-out
    e = m.embedding_size
    return m.num_layers * (4 * h * h + 2 * h * i) + 2 * h * e + e * v


def expert_parameters(manifest: DmoeManifest) -> int:
    """One expert's trainable values (``core.moe.server.experts``)."""
    h = manifest.expert.hidden
    if manifest.expert.kind == "ffn":  # hidden -> 4 hidden -> hidden, with a LayerNorm
        return (h * 4 * h + 4 * h) + (4 * h * h + h) + 2 * h
    return h * h + h  # linear


def hosted_experts(manifest: DmoeManifest, experts: int | None = None) -> int:
    """How many experts one expert server of ``manifest`` hosts: ``experts`` when they were chosen
    (``barnraise experts --count`` or ``--uids``), else the manifest's ``server.experts_per_server``
    (the engine's server, and ``barnraise experts`` without either)."""
    return manifest.server.experts_per_server if experts is None else experts


def training_state(manifest: AnyManifest, experts: int | None = None) -> tuple[int, float]:
    """The parameters this computer would train, and the bytes their weights (fp32) and the
    optimizer's state take together.

    A collaborative project: the whole model with its moments (``MOMENTS``, 4 bytes each, 1 with
    8-bit optimizer states). A dmoe project: the experts one expert server hosts, each with its own
    optimizer's moments, ``hosted_experts(manifest, experts)`` of them. A dmoe trainer's dense
    parts (its gate and its own layers) are not counted. ``experts`` is ignored for a collaborative
    project."""
    if isinstance(manifest, DmoeManifest):
        params = hosted_experts(manifest, experts) * expert_parameters(manifest)
        return params, params * 4.0 * (1 + MOMENTS.get(manifest.expert.optimizer, 2))
    params = model_parameters(manifest)
    t = manifest.training
    moment_bytes = 1.0 if t.optimizer_states == "8bit" else 4.0
    return params, params * (4 + MOMENTS.get(t.optimizer, 2) * moment_bytes)


def resource_use(manifest: AnyManifest, device_kind: str, device_name: str) -> ResourceUse:
    """The estimate for ``manifest`` on a computer that would train on ``device_kind`` ("cuda",
    "mps", "cpu"), named ``device_name`` for people."""
    if isinstance(manifest, DmoeManifest):
        return _dmoe_use(manifest, device_name)
    return _collaborative_use(manifest, device_kind, device_name)


def _collaborative_use(manifest: Manifest, device_kind: str, device_name: str) -> ResourceUse:
    params, state_bytes = training_state(manifest)
    t = manifest.training
    published = bool(manifest.network.checkpoint_url)
    disk = TOKENIZER_BYTES + (int(state_bytes) if published else 0)
    # training FLOPs per sample: 6 per weight and token
    flops_per_sample = 6 * _flops_per_token(manifest) * manifest.data.seq_len
    traffic = (
        active_modes()
        .parse(t.mode)
        .traffic(
            TrafficInputs(
                training=t,
                averaging=manifest.averaging,
                parameters=params,
                state_values=params * (1 + MOMENTS.get(t.optimizer, 2)),
                samples_per_second=EFFECTIVE_FLOPS.get(device_kind, EFFECTIVE_FLOPS["cpu"])
                / flops_per_sample,
                peers=ASSUMED_PEERS,
                codec=manifest.averaging.round_codec(),
                min_round_seconds=MIN_ROUND_SECONDS,
            )
        )
    )
    notes = [
        f"model: {count_text(params)} parameters ({size_text(params * 4)} in fp32)",
        traffic.note,
        (
            f"disk: the project's published checkpoint ({size_text(state_bytes)}) and its tokenizer"
            if published
            else "disk: the tokenizer only (the backbone keeps the checkpoints)"
        )
        + "; the training data is streamed, not stored",
    ]
    return ResourceUse(device_name, params, disk, int(traffic.bytes_per_hour), notes)


def _dmoe_use(manifest: DmoeManifest, device_name: str) -> ResourceUse:
    hosted = hosted_experts(manifest)
    per_expert = expert_parameters(manifest)
    params = hosted * per_expert
    moments = MOMENTS.get(manifest.expert.optimizer, 2)
    checkpoint = per_expert * 4 * (1 + moments)
    disk = hosted * manifest.server.keep_checkpoints * checkpoint
    # forward: inputs in, outputs out; backward: gradients in, input gradients out (float32)
    per_sample = 4 * manifest.expert.hidden * 4
    per_hour = hosted * ASSUMED_SAMPLES_PER_EXPERT * per_sample * 3600.0
    notes = [
        (
            f"hosts {hosted} of the grid's {manifest.grid.size} experts: "
            f"{count_text(per_expert)} parameters each"
        ),
        (
            f"network: about {size_text(per_hour)} an hour, if trainers send each expert "
            f"{ASSUMED_SAMPLES_PER_EXPERT:g} samples a second (it depends on how many train)"
        ),
        f"disk: {manifest.server.keep_checkpoints} checkpoint(s) of each hosted expert",
    ]
    return ResourceUse(device_name, params, int(disk), int(per_hour), notes)
