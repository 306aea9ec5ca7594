"""What ``barnraise swarm`` prints of the backbone's held-out evaluations: the loss beside the
unigram floor where there is one, as before where there is none, the loss always the sixth word
(the training-process tests read it there)."""

from __future__ import annotations

import pytest

from core.cli.swarm.text import SwarmPrinter
from core.worker.events import PeerEvaluation


def printed(event: PeerEvaluation, capsys: pytest.CaptureFixture[str]) -> str:
    SwarmPrinter().evaluation(event)
    return capsys.readouterr().out.strip()


def test_the_held_out_loss_is_printed_beside_the_floor(capsys: pytest.CaptureFixture[str]) -> None:
    event = PeerEvaluation(12, 5.7312, 0.123, 256, 4096, 1.5, 0.0, floor=6.2412)
    line = printed(event, capsys)
    assert line == (
        "held-out at epoch   12  loss 5.7312 nats, 0.51 below the unigram floor (6.24)  "
        "accuracy  12.3 %  (256 sequences, 4096 tokens)"
    )
    assert float(line.split()[5]) == 5.7312


def test_without_a_floor_the_loss_stands_alone(capsys: pytest.CaptureFixture[str]) -> None:
    line = printed(PeerEvaluation(3, 7.5, 0.05, 64, 1024, 1.0, 0.0), capsys)
    assert line == (
        "held-out at epoch    3  loss 7.5000 nats  accuracy   5.0 %  (64 sequences, 1024 tokens)"
    )
    assert float(line.split()[5]) == 7.5
    diverged = printed(PeerEvaluation(4, None, 0.0, 64, 1024, 1.0, 0.0, floor=6.0), capsys)
    assert diverged.startswith("held-out at epoch    4  loss not finite  accuracy")
