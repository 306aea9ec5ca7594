"""An expert server's receipts reach a real coordinator through the reporter; refusals are logged
once per cause, not once per report."""

from __future__ import annotations

import logging

import pytest

from core.account import AccountSession, CoordinatorClient
from core.account.reporter import CoordinatorReporter
from core.net import Identity
from core.trust.receipts import Receipt, sign_receipt
from tests.account.coordinator import PASSWORD, PROJECT, Coordinator


def receipt(trainer: Identity, server: Identity, samples: int, sequence: int) -> Receipt:
    return sign_receipt(
        trainer,
        PROJECT,
        server.peer_id,
        session=bytes(16),
        sequence=sequence,
        forward_samples=samples,
        backward_samples=samples,
    )


async def test_receipts_are_credited_and_refusals_logged_once(
    coordinator: Coordinator, client: CoordinatorClient, caplog: pytest.LogCaptureFixture
) -> None:
    server, trainer, stranger = Identity.generate(), Identity.generate(), Identity.generate()
    alice = AccountSession(client, await client.login("alice", PASSWORD))
    await alice.request_pass(server.peer_id, server.sign, project=PROJECT)
    mod = AccountSession(client, await client.login("mod", PASSWORD))
    await mod.request_pass(trainer.peer_id, trainer.sign, project=PROJECT)

    reporter = CoordinatorReporter(alice, first_retry=0.01)
    caplog.set_level(logging.WARNING, logger="core.account.reporter")
    reporter.submit_receipts([receipt(trainer, server, 10, 1), receipt(stranger, server, 5, 1)])
    reporter.submit_receipts([receipt(trainer, server, 30, 2), receipt(stranger, server, 9, 2)])
    reporter.submit_receipts([])
    await reporter.close()
    assert (reporter.receipts_accepted, reporter.expert_samples_credited) == (2, 60)
    assert len(reporter.rejected) == 2
    refusals = [r for r in caplog.records if "rejected" in r.getMessage()]
    assert len(refusals) == 1  # the same cause twice: logged once
    assert "trainer's key" in refusals[0].getMessage()
    board = await client.leaderboard()
    assert [(u["username"], u["expert_samples"]) for u in board["users"]] == [("alice", 60)]
