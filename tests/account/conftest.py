"""A coordinator on loopback with alice (volunteer) and mod (moderator), checked for leaks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.account import CoordinatorClient
from tests.account.coordinator import Coordinator, running_coordinator
from tests.support.leaks import assert_no_leaks, open_fd_count


@pytest.fixture
async def coordinator(tmp_path: Path) -> AsyncIterator[Coordinator]:
    baseline = open_fd_count()
    async with running_coordinator(tmp_path) as running:
        running.add_user("alice")
        running.add_user("mod", moderator=True)
        yield running
    await assert_no_leaks(baseline)


@pytest.fixture
async def client(coordinator: Coordinator) -> AsyncIterator[CoordinatorClient]:
    async with CoordinatorClient(coordinator.url, timeout=5.0) as client:
        yield client
