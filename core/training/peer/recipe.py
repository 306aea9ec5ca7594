"""The project's training recipe, from its manifest: the model with its seeded initial weights,
the optimizer and learning-rate schedule, the tokenizer, the data stream, the loss, and the
averaging settings of each role.

Every peer of a project builds the same model from the same seed, so that all start from the same
weights; each walks the data shards in its own order (``data_seed``).
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeAlias

import torch

from core.averaging import AveragerConfig
from core.averaging.config import VerificationConfig
from core.averaging.robust.aggregation import AggregationConfig, Method
from core.config.roles import BACKBONE, CLIENT
from core.data import (
    DataSource,
    TextTokenizer,
    clm_batches,
    load_tokenizer,
    mlm_batches,
    stream_texts,
)
from core.models.albert import AlbertConfig, AlbertMLM
from core.models.llama import LlamaCLM, LlamaConfig
from core.modes import active_modes
from core.optim.adamw import AdamW
from core.optim.lamb import Lamb
from core.optim.schedule import albert_lr_lambda
from core.project import Manifest
from core.project.sections import ALBERT_MLM, LLAMA_CLM
from core.training.checkpoints import CheckpointStore
from core.training.errors import CheckpointError
from core.training.mode import mode_of
from core.training.state import TrainingState
from core.util.errors import ConfigError
from core.util.web_client import open_url
from core.worker.errors import TrainingError

LanguageModel: TypeAlias = AlbertMLM | LlamaCLM
"""The models ``build_model`` makes: both take ``(input_ids, attention_mask, labels)`` and return
an output with ``loss`` and ``logits``."""

log = logging.getLogger(__name__)


def build_model(manifest: Manifest) -> LanguageModel:
    """The project's model with its initial weights (the same on every peer: seeded)."""
    section = manifest.model
    if section.kind == ALBERT_MLM:
        albert = AlbertConfig(
            vocab_size=section.vocab_size,
            embedding_size=section.embedding_size,
            hidden_size=section.hidden_size,
            num_layers=section.num_layers,
            num_heads=section.num_heads,
            intermediate_size=section.intermediate_size,
            max_position=section.max_position,
            dropout=section.dropout,
            gradient_checkpointing=section.gradient_checkpointing,
        )
        return _seeded(manifest, lambda: AlbertMLM(albert))
    if section.kind == LLAMA_CLM:
        llama = LlamaConfig(
            vocab_size=section.vocab_size,
            hidden_size=section.hidden_size,
            num_layers=section.num_layers,
            num_heads=section.num_heads,
            num_kv_heads=section.kv_heads,
            intermediate_size=section.intermediate_size,
            max_position=section.max_position,
            rope_theta=section.rope_theta,
            tie_embeddings=section.tie_embeddings,
            gradient_checkpointing=section.gradient_checkpointing,
        )
        return _seeded(manifest, lambda: LlamaCLM(llama))
    raise TrainingError(f"unknown model kind {section.kind!r}")


_GLOBAL_RNG = threading.Lock()
"""Held while a model draws its initial weights from torch's process-wide generator: the engine's
projects (and a test's swarm) build models on several threads of one process, and two builds that
interleave their draws give peers of one project different initial weights (a peer that starts on
other weights than the backbone's replica fails its work checks)."""


def _seeded(manifest: Manifest, build: Callable[[], LanguageModel]) -> LanguageModel:
    """``build()`` with torch's generator seeded with the manifest's seed, and put back after."""
    with _GLOBAL_RNG, torch.random.fork_rng(devices=[]):
        torch.manual_seed(manifest.training.seed)
        return build()


def build_optimizer(model: torch.nn.Module, manifest: Manifest) -> torch.optim.Optimizer:
    """The manifest's optimizer; LAMB and AdamW with its ``optimizer_states`` and
    ``offload_optimizer`` (``core.optim.moments``), which the others refuse."""
    t = manifest.training
    params = [p for p in model.parameters() if p.requires_grad]
    special = t.optimizer_states != "32bit" or t.offload_optimizer
    if special and t.optimizer not in ("lamb", "adamw"):
        raise ConfigError(
            f"training.optimizer_states = {t.optimizer_states!r} and training.offload_optimizer "
            f"= {str(t.offload_optimizer).lower()} need optimizer lamb or adamw, "
            f"not {t.optimizer!r}"
        )
    states, offload = t.optimizer_states, t.offload_optimizer
    # the mode's rate: a diloco inner step takes one microbatch, not the collaboration's batch
    lr = active_modes().parse(t.mode).learning_rate(t)
    if t.optimizer == "lamb":
        return Lamb(
            params, lr, betas=t.betas, eps=t.eps, weight_decay=t.weight_decay,
            states=states, offload=offload,
        )  # fmt: skip
    if t.optimizer == "adamw" and special:
        return AdamW(
            params, lr, betas=t.betas, eps=t.eps, weight_decay=t.weight_decay,
            states=states, offload=offload,
        )  # fmt: skip
    if t.optimizer == "adam":
        return torch.optim.Adam(params, lr, betas=t.betas, eps=t.eps, weight_decay=t.weight_decay)
    if t.optimizer == "adamw":
        return torch.optim.AdamW(params, lr, betas=t.betas, eps=t.eps, weight_decay=t.weight_decay)
    if t.optimizer == "sgd":
        return torch.optim.SGD(params, lr, momentum=t.betas[0], weight_decay=t.weight_decay)
    raise TrainingError(f"unknown optimizer {t.optimizer!r}")


def fetch_tokenizer(manifest: Manifest, data_base: str | None, work_dir: Path) -> TextTokenizer:
    """The project's tokenizer: a local file, or a URL copied into ``work_dir`` at every start
    (a copy kept from an earlier start may be of a tokenizer since replaced, as the demo's is when
    its corpus changes); the kept copy only when the URL does not answer."""
    where = manifest.resolve_url(manifest.data.tokenizer, data_base=data_base)
    if where.startswith(("http://", "https://")):
        local = work_dir / "tokenizer.json"
        work_dir.mkdir(parents=True, exist_ok=True)
        partial = local.with_suffix(".part")
        try:
            # the system's certificates and proxy settings, as every download (web_client)
            with open_url(where, timeout=30) as response, partial.open("wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            if not local.exists():
                raise
            log.warning("the tokenizer at %s cannot be fetched (%s): using the copy kept in %s",
                        where, exc, local)  # fmt: skip
        else:
            partial.replace(local)
        return load_tokenizer(local)
    return load_tokenizer(Path(where.removeprefix("file://")))


def data_stream(
    manifest: Manifest, tokenizer: TextTokenizer, *, data_base: str | None, seed: int
) -> Iterator[dict[str, torch.Tensor]]:
    """The batches the project's model kind trains on: masked for ``albert-mlm``, causal for
    ``llama-clm``; each peer's order of the shards and texts follows its ``seed``."""
    d = manifest.data
    sources = [
        DataSource(
            tuple(manifest.resolve_url(u, data_base=data_base) for u in s.urls),
            weight=s.weight,
            format=s.format,
            text_field=s.text_field,
        )
        for s in d.sources
    ]
    texts = stream_texts(sources, seed=seed, shuffle_buffer=d.shuffle_buffer)
    batch_size = manifest.training.microbatch_size
    if manifest.model.kind == LLAMA_CLM:
        return clm_batches(texts, tokenizer, seq_len=d.seq_len, batch_size=batch_size, seed=seed)
    return mlm_batches(
        texts,
        tokenizer,
        seq_len=d.seq_len,
        batch_size=batch_size,
        mask_prob=d.mask_prob,
        seed=seed,
    )


def mlm_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The loss of either model kind on one of ``data_stream``'s batches (masked tokens for
    ``albert-mlm``, every next token for ``llama-clm``: the model knows which)."""
    output = model(batch["input_ids"], batch["attention_mask"], batch["labels"])
    assert output.loss is not None
    loss: torch.Tensor = output.loss
    return loss


def averager_config(manifest: Manifest, role: str) -> AveragerConfig:
    a = manifest.averaging
    mode = mode_of(manifest)
    wait = mode.matchmaking(manifest)
    return AveragerConfig(
        target_group_size=a.target_group_size,
        min_group_size=min(a.min_group_size, a.target_group_size),
        min_matchmaking_time=wait.least,
        max_matchmaking_time=wait.most,
        codec=manifest.averaging.round_codec(),
        allreduce_timeout=a.allreduce_timeout,
        compute=0.0 if role == BACKBONE else 1.0,
        client_mode=role == CLIENT,
        # the backbone joins with weight 0 but as a member that receives the averages: it steps
        # its replica of the state with them (``DedlocBackbone``)
        reduce_only=False,
        aggregation=mode.aggregation(
            AggregationConfig(
                method=Method(a.aggregation),
                clip_tau=a.clip_tau,
                clip_iterations=a.clip_iterations,
                norm_ratio_limit=a.norm_ratio_limit,
                weight_ratio_limit=a.weight_ratio_limit,
            )
        ),
        verification=VerificationConfig(enabled=a.verify_reducers),
    )


def training_state(model: torch.nn.Module, manifest: Manifest) -> TrainingState:
    """``model`` with the manifest's optimizer and learning-rate schedule (warm-up, then decay)."""
    t = manifest.training
    optimizer = build_optimizer(model, manifest)
    return TrainingState(
        model, optimizer, lr_lambda=albert_lr_lambda(t.warmup_steps, t.total_steps)
    )


def load_checkpoint(state: TrainingState, path: Path) -> None:
    """Put the checkpoint at ``path`` into ``state`` (on the training thread); ``CheckpointError``
    naming it when it cannot be read or does not fit."""
    checkpoint = CheckpointStore.load(path)
    try:
        state.restore(checkpoint)
    except CheckpointError as exc:
        raise CheckpointError(f"cannot start from {path}: {exc}") from None
