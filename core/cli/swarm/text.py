"""SwarmPrinter: what ``barnraise swarm`` prints while its swarm runs (a ``SwarmOutput``).

Progress and one line per epoch go to stdout, flushed at once (a terminal, a pipe, the desktop app's
log file); problems go to stderr, prefixed with the command's name. Tests read the ``epoch``,
``held-out at epoch`` and ``join with:`` lines, so their shape is kept.
"""

from __future__ import annotations

import sys
from pathlib import Path

from core.swarm.dmoe_run import DmoeLine, DmoeStop, ReceiptCredit
from core.swarm.moderated import Standings
from core.swarm.run import Joining
from core.util.amounts import below_floor
from core.worker.events import PeerEvaluation, PeerMetrics


class SwarmPrinter:
    def preparing(self, data_root: Path) -> None:
        _say(f"preparing the demo data in {data_root} …")

    def coordinator(self, url: str, manifest: Path) -> None:
        _say(f"coordinator at {url}; manifest {manifest}")

    def running(self, joining: Joining) -> None:
        _say(
            f"{joining.trainers} trainer(s) and a backbone on loopback; "
            f"data at {joining.data_base}; logs in {joining.logs}"
        )
        # how an engine (``barnraise engine``) joins this swarm as one more trainer
        _say(
            f"join with: barnraise ctl attach {joining.manifest} "
            f"--initial-peers {joining.address} --data-base {joining.data_base}"
        )
        _say("or from an engine on this computer: barnraise ctl attach --local-swarm")

    def metrics(self, event: PeerMetrics) -> None:
        shown = f"{event.loss:.4f}" if event.loss is not None else "   -  "
        _say(
            f"epoch {event.epoch:>4}  loss {shown}  "
            f"samples/s {event.samples_per_second:>8.1f}  peers {event.alive_peers}"
        )

    def evaluation(self, event: PeerEvaluation) -> None:
        # not an "epoch" line: readers of those take every one to be a training epoch's; the
        # loss stays the sixth word, with the unigram floor after it where the backbone has one
        _say(
            f"held-out at epoch {event.epoch:>4}  {below_floor(event.loss, event.floor)}  "
            f"accuracy {100 * event.accuracy:5.1f} %  ({event.samples} sequences, "
            f"{event.tokens} tokens)"
        )

    def problem(self, message: str) -> None:
        print(f"barnraise swarm: {message}", file=sys.stderr, flush=True)

    def byzantine(self, name: str, peer: str, attack: str) -> None:
        _say(f"{name} ({peer}) misbehaves on purpose: --attack {attack}")

    def evidence(self, line: str) -> None:
        _say(f"backbone: {line}")

    def accused(self, lines: list[str]) -> None:
        _say("accused during this run:")
        for line in lines:
            _say(f"  {line}")

    def standings(self, standings: Standings) -> None:
        _say("leaderboard (samples in completed epochs):")
        for entry in standings.users:
            _say(
                f"  #{entry['rank']:<3} {entry['username']:<12} {entry['samples']:>9} samples  "
                f"{entry['compute_seconds']:>8.1f} s compute  {entry['devices']} device(s)"
            )
        verdict = "they match" if standings.match else "they DO NOT match"
        _say(
            f"  total {standings.samples} samples over {standings.epochs} epochs; the backbone's "
            f"metrics counted {standings.counted}: {verdict}"
        )


class DmoePrinter:
    """What ``barnraise swarm --project dmoe`` prints (a ``DmoeOutput``)."""

    def running(self, servers: int, trainers: int, address: str, logs: Path) -> None:
        _say(f"{servers} expert server(s) and {trainers} trainer(s) on loopback; logs in {logs}")
        _say(f"more servers or trainers join with: --initial-peers {address}")
        _say(
            "or from an engine on this computer (it hosts experts): barnraise ctl attach --local-swarm"
        )

    def progress(self, line: DmoeLine) -> None:
        accuracy = f"{line.accuracy:.3f}" if line.accuracy is not None else "  -  "
        _say(
            f"{line.seconds:6.0f} s  steps {line.steps:>6}  loss {line.loss:.4f}  "
            f"accuracy {accuracy}  samples/s {line.samples_per_second:>7.1f}  "
            f"answered {line.answered:6.1%}  trainers {line.trainers}  "
            f"expert samples {line.expert_samples}"
        )

    def stopped(self, stop: DmoeStop) -> None:
        _say(
            f"expert servers stopped: {stop.saved_by} of {stop.servers} saved their experts "
            f"({stop.saved} checkpoints at the stop) in {stop.checkpoints}"
        )
        if stop.untrained:
            # the test of the swarm reads this line: keep its shape
            _say(f"never trained, so not checkpointed: {' '.join(stop.untrained)}")

    def problem(self, message: str) -> None:
        print(f"barnraise swarm: {message}", file=sys.stderr, flush=True)

    def receipts(self, credited: ReceiptCredit) -> None:
        # the servers' counts are their last reports: samples in flight at the stop are the rest
        _say(
            f"leaderboard: {credited.credited} expert samples credited by the trainers' receipts "
            f"to {credited.accounts} account(s), of {credited.served} the servers reported "
            f"computing ({credited.share:.1%})"
        )


def _say(line: str) -> None:
    print(line, flush=True)
