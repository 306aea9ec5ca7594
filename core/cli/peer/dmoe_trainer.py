"""``barnraise peer`` for a ``dmoe`` project: an asynchronous trainer of a mixture of experts.

    barnraise peer --manifest resources/dmoe-demo/project.toml --initial-peers /ip4/…/p2p/…

``core.cli.peer.command`` hands over here when the manifest says ``kind = "dmoe"``: the same command
trains either kind of project. The trainer finds the experts through the DHT, keeps the manifest's
``trainer.concurrency`` batches in flight, and prints one JSON line per event on stdout (``ready``
with its address, ``progress`` every ``--report-every`` steps with the mean loss, the accuracy on the
held-out digits now and then, samples/s, failed batches, staleness; ``stopped``); logs go to stderr.
SIGINT/SIGTERM (Ctrl-C) stop it: the batches in flight are dropped at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING

from core.cli.access import with_access
from core.cli.signals import stop_on_signals
from core.config.ports import listen_on
from core.project import DmoeManifest
from core.util.errors import ConfigError

if TYPE_CHECKING:
    from core.moe.client.trainer_events import MoETrainerEvent
    from core.moe.client.training_peer import MoETrainerSettings


def settings_from_args(args: argparse.Namespace, manifest: DmoeManifest) -> MoETrainerSettings:
    from core.moe.client.training_peer import MoETrainerSettings  # noqa: PLC0415 - torch

    if args.role != "peer":
        raise ConfigError(
            f"project {manifest.project.name} is a mixture of experts: it has no backbone; "
            "its organizers host experts instead ('barnraise experts --manifest FILE')"
        )
    unused = [
        flag
        for flag, value in (
            ("--data-base", args.data_base),
            ("--target-batch-size", args.target_batch_size),
            ("--from-checkpoint", args.from_checkpoint),
            ("--attack", args.attack),
            ("--verify-reducers", args.verify_reducers or None),
        )
        if value is not None
    ]
    if unused:
        raise ConfigError(f"{', '.join(unused)}: not used by a mixture-of-experts trainer")
    if args.device not in ("cpu", "auto"):
        raise ConfigError("a mixture-of-experts trainer computes its small local layers on the CPU")
    port = manifest.network.peer_port if args.port is None else args.port
    return MoETrainerSettings(
        manifest,
        listen=tuple(listen_on(args.host, port)),
        port_fallback=args.port is None,
        initial_peers=tuple(args.initial_peers or ()),
        data_seed=args.data_seed if args.data_seed is not None else 0,
        max_steps=args.until_epoch,  # the hidden test hook: here, steps
    )


async def run_trainer(args: argparse.Namespace, manifest: DmoeManifest) -> int:
    import torch  # noqa: PLC0415 - torch loads slowly

    settings = settings_from_args(args, manifest)
    if args.threads:
        torch.set_num_threads(args.threads)
    stop = asyncio.Event()
    stop_on_signals(stop)
    return await with_access(settings, args, lambda chosen, _: _train(chosen, stop))


async def _train(settings: MoETrainerSettings, stop: asyncio.Event) -> int:
    from core.moe.client.trainer_events import to_json  # noqa: PLC0415
    from core.moe.client.training_peer import MoETrainerPeer  # noqa: PLC0415

    def emit(event: MoETrainerEvent) -> None:
        print(json.dumps(to_json(event)), flush=True)

    peer = MoETrainerPeer(settings, emit)
    try:
        await peer.run(stop)
    finally:
        await peer.close()
    return 0
