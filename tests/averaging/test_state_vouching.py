"""Whom a downloader believes: block digests checked as bytes arrive, and a state loaded only when
donors of two networks offer it, or every donor agrees where most peers are."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from core.averaging.messages import StateHeader, StateRequest
from core.averaging.sharing.digest import BLOCK_BYTES, block_digests, state_digest
from core.averaging.sharing.state import (
    StateDownloadError,
    StateSharing,
    digest_of,
    header_problem,
)
from core.averaging.sharing.vouching import Offer, Vouching, choose, network_of
from core.net.wire.rpc import CallContext
from core.net.wire.stream import Stream
from core.trust.identity import Identity
from tests.averaging.conftest import MakeAveragers

# ---- digests -------------------------------------------------------------------------------------


def test_block_digests_hash_the_bytes_laid_end_to_end() -> None:
    arrays = [np.arange(1000, dtype=np.float32), np.full((3, 7), 2.5), np.int64(7)]
    joined = b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)
    block = 1024
    expected = [
        hashlib.sha256(joined[i : i + block]).digest() for i in range(0, len(joined), block)
    ]
    assert block_digests(arrays, block) == expected
    assert block_digests([joined and np.frombuffer(joined, np.uint8)], block) == expected
    assert block_digests([], block) == [hashlib.sha256().digest()]  # an empty state: one digest
    with pytest.raises(ValueError, match="positive"):
        block_digests(arrays, 0)


def test_the_state_digest_covers_layout_and_bytes() -> None:
    blocks = block_digests([np.zeros(16, np.float32)])
    base = state_digest([[16]], ["<f4"], BLOCK_BYTES, blocks)
    assert base == state_digest([[16]], ["<f4"], BLOCK_BYTES, list(blocks))
    assert base != state_digest([[4, 4]], ["<f4"], BLOCK_BYTES, blocks)
    assert base != state_digest([[16]], ["<i4"], BLOCK_BYTES, blocks)
    assert base != state_digest([[16]], ["<f4"], BLOCK_BYTES, block_digests([np.ones(16)]))


def header(data: np.ndarray, **changes: Any) -> StateHeader:
    fields: dict[str, Any] = {
        "version": 3,
        "metadata": {"epoch": 3},
        "shapes": [[data.size]],
        "dtypes": [data.dtype.str],
        "total_bytes": data.nbytes,
        "block_bytes": BLOCK_BYTES,
        "blocks": block_digests([data]),
    }
    fields.update(changes)
    return StateHeader(**fields)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({}, None),
        ({"version": 4}, "announced epoch 3 but offers epoch 4"),
        ({"total_bytes": 12}, "adds up to 40 bytes, not the 12"),
        ({"dtypes": ["<f4", "<f4"]}, "shapes and dtypes of different counts"),
        ({"dtypes": ["?x9"]}, "a dtype numpy does not know"),
        ({"shapes": [[-10]]}, "negative dimension"),
        ({"blocks": []}, "commits to nothing"),
        ({"block_bytes": 0}, "commits to nothing"),
        ({"blocks": [b"\0" * 32] * 2}, "do not cover its state"),
        ({"blocks": [b"short"]}, "do not cover its state"),
    ],
)
def test_a_header_that_does_not_add_up_is_refused(
    changes: dict[str, Any], problem: str | None
) -> None:
    found = header_problem(header(np.arange(10, dtype=np.float32), **changes), 3)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found


# ---- the rule ------------------------------------------------------------------------------------

PEERS = [Identity.generate().peer_id for _ in range(6)]


def offers(*spec: tuple[int, str, str]) -> list[Offer]:
    """(peer index, digest, network) each."""
    return [Offer(PEERS[i], digest, network) for i, digest, network in spec]


def test_two_networks_offering_the_same_bytes_vouch_for_them() -> None:
    verdict = choose(offers((0, "a", "net1"), (1, "a", "net2")), Vouching(), 5)
    assert verdict.digest == "a"
    assert verdict.vouchers == [PEERS[0], PEERS[1]]


def test_many_donors_of_one_network_vouch_for_nothing() -> None:
    # a Sybil's PeerIDs cost nothing; its network is one
    verdict = choose(offers((0, "x", "net1"), (1, "x", "net1"), (2, "x", "net1")), Vouching(), 5)
    assert verdict.digest is None
    assert "none is offered by donors of 2 networks" in verdict.reason


def test_agreeing_donors_vouch_alone_only_where_most_peers_are() -> None:
    lone = offers((0, "a", "net1"))
    assert choose(lone, Vouching(settled=lambda epoch: epoch <= 5), 5).digest == "a"
    # a lone donor announcing an epoch ahead of everyone
    assert choose(lone, Vouching(settled=lambda epoch: epoch <= 5), 9).digest is None
    # and never where donors disagree
    split = offers((0, "a", "net1"), (1, "b", "net1"))
    assert choose(split, Vouching(settled=lambda _: True), 5).digest is None


def test_the_vouched_state_wins_and_the_others_are_skipped_not_accused() -> None:
    spec = offers((0, "good", "n1"), (1, "good", "n2"), (2, "good", "n3"), (3, "bad", "n4"))
    verdict = choose(spec, Vouching(), 5)
    assert verdict.digest == "good"
    assert set(verdict.skipped) == {PEERS[3]}
    assert verdict.accused == {}


def test_in_an_exact_mode_a_donor_naming_the_same_anchor_with_other_bytes_is_accused() -> None:
    spec = [
        Offer(PEERS[0], "good", "n1", anchor="A"),
        Offer(PEERS[1], "good", "n2", anchor="A"),
        Offer(PEERS[2], "forged", "n3", anchor="A"),  # claims A, serves other bytes
        Offer(PEERS[3], "apart", "n4", anchor="B"),  # an honest member that landed apart
    ]
    verdict = choose(spec, Vouching(exact=True), 5)
    assert verdict.digest == "good"
    assert set(verdict.accused) == {PEERS[2]}
    assert "names the anchor A" in verdict.accused[PEERS[2]]
    assert set(verdict.skipped) == {PEERS[3]}
    assert choose(spec, Vouching(), 5).accused == {}  # not an exact mode: nobody


def confirmed_as(table: dict[int, str]) -> Vouching:
    """Vouching in a project whose states are anchored: ``table`` maps the confirmed version to
    its confirmed digest ("": the epoch only)."""
    return Vouching(exact=True, confirmed=table.get, trusted=lambda donor: donor == PEERS[3])


@pytest.mark.parametrize(
    ("spec", "table", "digest", "accused", "skipped"),
    [
        # one donor of the confirmed bytes is enough, against any number of one network
        ([(0, "good", "n1", ""), (1, "bad", "n2", ""), (2, "bad", "n3", "")],
         {3: "good"}, "good", set(), {1, 2}),
        # naming the confirmed state and serving other bytes: accused
        ([(0, "good", "n1", "good"), (1, "bad", "n1", "good")],
         {3: "good"}, "good", {1}, set()),
        # donors of two networks agreeing on unconfirmed bytes: nothing is loaded
        ([(0, "other", "n1", "other"), (1, "other", "n2", "other")],
         {3: "good"}, None, set(), {0, 1}),
        # a version nothing confirms is not loaded, however vouched
        ([(0, "good", "n1", ""), (1, "good", "n2", "")], {2: "good"}, None, set(), set()),
        # the epoch confirmed without its bytes (dedloc): the usual rules, or a confirming key
        ([(0, "a", "n1", ""), (1, "a", "n2", "")], {3: ""}, "a", set(), set()),
        ([(0, "a", "n1", ""), (3, "b", "n1", "")], {3: ""}, "b", set(), {0}),
        ([(0, "a", "n1", "")], {3: ""}, None, set(), set()),
    ],
)  # fmt: skip
def test_where_states_are_confirmed_only_the_confirmed_one_is_loaded(
    spec: list[tuple[int, str, str, str]],
    table: dict[int, str],
    digest: str | None,
    accused: set[int],
    skipped: set[int],
) -> None:
    offered = [Offer(PEERS[i], d, network, anchor=a) for i, d, network, a in spec]
    verdict = choose(offered, confirmed_as(table), 3)
    assert verdict.digest == digest
    assert set(verdict.accused) == {PEERS[i] for i in accused}
    assert set(verdict.skipped) == {PEERS[i] for i in skipped}
    assert all(o.digest == digest for o in offered if o.donor in verdict.vouchers)


def test_a_version_nothing_confirms_is_not_even_asked_for() -> None:
    vouching = confirmed_as({5: "x"})
    assert vouching.considers(5)
    assert not vouching.considers(6)
    assert not vouching.considers(4)
    assert Vouching().considers(6)  # a project that anchors nothing


def test_more_networks_win_over_fewer() -> None:
    spec = offers((0, "a", "n1"), (1, "a", "n2"), (2, "b", "n3"), (3, "b", "n4"), (4, "b", "n5"))
    assert choose(spec, Vouching(), 5).digest == "b"


@pytest.mark.parametrize(
    ("address", "network"),
    [
        (("93.184.216.34", 4001), "93.184.216.0/24"),
        (("93.184.216.200", 4002), "93.184.216.0/24"),  # a Sybil next door: the same network
        (("151.101.1.69", 4001), "151.101.1.0/24"),
        (("2a00:1450:4001:80b::200e", 4001), "2a00:1450:4001::/48"),
        (("::ffff:93.184.216.9", 4001), "93.184.216.0/24"),
        (("192.168.1.20", 4001), "192.168.1.20"),  # a LAN: each machine
        (("127.0.0.1", 4001), "127.0.0.1 port 4001"),  # this computer: each peer
        (None, "unknown"),
        (("not-an-ip", 1), "host not-an-ip"),
    ],
)
def test_networks_of_addresses(address: tuple[str, int] | None, network: str) -> None:
    assert network_of(address) == network


# ---- downloads -----------------------------------------------------------------------------------


def state(version: int = 3, value: float = 1.0) -> tuple[int, dict[str, Any], list[np.ndarray]]:
    """Three blocks of 16 KiB and a bit."""
    return version, {"epoch": version}, [np.full(12_345, value, np.float32)]


SMALL_BLOCKS = 16 << 10


async def test_a_donor_sending_other_bytes_than_its_header_lists_is_caught_and_accused(
    make_averagers: MakeAveragers, monkeypatch: pytest.MonkeyPatch
) -> None:
    averagers = await make_averagers(4)
    monkeypatch.setattr("core.averaging.sharing.state.BLOCK_BYTES", SMALL_BLOCKS)
    donors = [StateSharing(a.host, a.dht, "test") for a in averagers[:3]]
    liar = donors[0]
    honest_range = StateSharing._on_range

    async def flip_a_byte(
        self: StateSharing, ctx: CallContext, request: StateRequest, stream: Stream
    ) -> Any:
        if self is not liar:
            return await honest_range(self, ctx, request, stream)
        snapshot = await self._current()
        forged = snapshot.data[request.start : request.end].copy()
        forged[-1] ^= 0xFF
        await stream.send_data(forged.data)
        return await honest_range(self, ctx, StateRequest(request.end, request.end), stream)

    monkeypatch.setattr(StateSharing, "_on_range", flip_a_byte)
    for donor in donors:
        donor.serve(state)
        assert await donor.announce(3)
    downloader = StateSharing(averagers[3].host, averagers[3].dht, "test")
    got = await downloader.download(timeout=30, max_donors=3, range_bytes=SMALL_BLOCKS)
    np.testing.assert_array_equal(got.tensors[0], state()[2][0])
    liar_id = averagers[0].host.peer_id
    assert liar_id not in got.donors
    assert "is not the bytes its header lists" in got.refused.accused[liar_id]
    assert got.digest == digest_of(await donors[1].served_header())


async def test_the_served_header_is_the_state_a_downloader_loads(
    make_averagers: MakeAveragers,
) -> None:
    averagers = await make_averagers(3)
    donors = [StateSharing(a.host, a.dht, "test") for a in averagers[:2]]
    for donor in donors:
        donor.serve(state)
        assert await donor.announce(3)
    served = await donors[0].served_header()
    tensors = state()[2]
    assert (served.version, served.metadata) == (3, {"epoch": 3})
    assert served.shapes == [[12_345]]
    assert served.total_bytes == tensors[0].nbytes
    assert served.blocks == block_digests(tensors, served.block_bytes)
    downloader = StateSharing(averagers[2].host, averagers[2].dht, "test")
    got = await downloader.download(timeout=30)
    assert got.digest == digest_of(served)


async def test_a_tampered_state_offered_beside_honest_ones_is_never_loaded(
    make_averagers: MakeAveragers,
) -> None:
    averagers = await make_averagers(4)
    values = [666.0, 1.0, 1.0]  # the first donor's state is its own, its header consistent
    for averager, value in zip(averagers, values, strict=False):
        donor = StateSharing(averager.host, averager.dht, "test")
        donor.serve(lambda v=value: state(3, v))
        assert await donor.announce(3)
    for _ in range(3):  # whichever donor answers first
        downloader = StateSharing(averagers[3].host, averagers[3].dht, "test")
        got = await downloader.download(timeout=30)
        np.testing.assert_array_equal(got.tensors[0], np.full(12_345, 1.0, np.float32))
        assert averagers[0].host.peer_id in got.refused.skipped
        assert averagers[0].host.peer_id not in got.donors


async def test_a_lone_donor_ahead_of_everyone_is_passed_over_for_the_vouched_epoch(
    make_averagers: MakeAveragers,
) -> None:
    averagers = await make_averagers(4)
    for averager, version in zip(averagers, [9, 5, 5], strict=False):
        donor = StateSharing(averager.host, averager.dht, "test")
        donor.serve(lambda v=version: state(v, float(v)))
        assert await donor.announce(version)
    downloader = StateSharing(averagers[3].host, averagers[3].dht, "test")
    settled = Vouching(settled=lambda epoch: epoch <= 5)
    got = await downloader.download(timeout=30, vouching=settled)
    assert got.version == 5
    # nothing at all vouched for: a clear error, naming why
    with pytest.raises(StateDownloadError, match="none is offered by donors of 2 networks"):
        await downloader.download(newer_than=5, timeout=30, vouching=settled)


async def test_a_donor_whose_header_commits_to_nothing_is_not_loaded(
    make_averagers: MakeAveragers, monkeypatch: pytest.MonkeyPatch
) -> None:
    averagers = await make_averagers(3)
    original = StateSharing._on_header

    async def bare(self: StateSharing, ctx: CallContext, request: Any) -> StateHeader:
        full = await original(self, ctx, request)
        return StateHeader(full.version, full.metadata, full.shapes, full.dtypes, full.total_bytes)

    monkeypatch.setattr(StateSharing, "_on_header", bare)  # before serve(), which binds it
    for averager in averagers[:2]:
        donor = StateSharing(averager.host, averager.dht, "test")
        donor.serve(state)
        assert await donor.announce(3)
    downloader = StateSharing(averagers[2].host, averagers[2].dht, "test")
    with pytest.raises(StateDownloadError, match="commits to nothing") as caught:
        await downloader.download(timeout=30)
    assert len(caught.value.refused.skipped) == 2
