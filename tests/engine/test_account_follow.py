"""The account follows the active project while that project's peer may already be starting: a
peer asking for its pass during the change waits for it, instead of finding the account still at
the old coordinator and failing with "the manifest changed" (then retried only 30 s later)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from core.account import CredentialStore, NotLoggedIn
from core.api import AccountInfo
from core.engine.account import Account
from core.net import Identity
from core.project import load_any_manifest
from tests.account.coordinator import running_coordinator
from tests.account.memory_keyring import MemoryKeyring


class HeldKeyring(MemoryKeyring):
    """Reads block until ``release`` is set: a keyring slow to answer, as on a busy machine."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = threading.Event()
        self.release = threading.Event()

    def get_password(self, service: str, username: str) -> str | None:
        self.reading.set()
        self.release.wait(timeout=30)
        return super().get_password(service, username)


async def test_a_pass_asked_for_during_a_change_of_project_waits_for_the_change(
    tmp_path: Path,
) -> None:
    async with running_coordinator(tmp_path) as coordinator:
        path = coordinator.manifest_file(tmp_path)
        manifest = load_any_manifest(path)
        keyring = HeldKeyring()
        seen: list[AccountInfo] = []
        account = Account(CredentialStore(keyring), on_change=seen.append)
        identity = Identity.generate()
        try:
            following = asyncio.create_task(account.select(path))
            # the change is under way: the manifest read, the saved login being looked up
            assert await asyncio.to_thread(keyring.reading.wait, 30)
            asking = asyncio.create_task(
                account.open_access(manifest, identity.peer_id, identity.sign)
            )
            await asyncio.sleep(0.2)
            assert not asking.done()  # it waits for the change, not judging the half-made one
            keyring.release.set()
            await following
            # the account now follows this project, and nobody logged in there: that is what
            # the volunteer must hear, not that the manifest changed
            with pytest.raises(NotLoggedIn, match="log in"):
                await asking
        finally:
            keyring.release.set()
            await account.close()
