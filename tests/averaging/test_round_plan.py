"""The round's plan as tables, without a network: who reduces how much, who sends, receives and
verifies, what each member's weight counts for, and how chunks are cut and encoded.

Groups are written as one letter per member: ``t`` a trainer (sends, reduces, receives), ``c`` a
client (nobody can dial it), ``a`` an reduce-only member (no data of its own; it reduces).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from core.averaging import AveragerConfig
from core.averaging.config import VerificationConfig
from core.averaging.messages import GroupSpec, MemberInfo
from core.averaging.robust.aggregation import AggregationConfig, Method
from core.averaging.round.plan import RoundPlan, plan_round
from core.codecs import AUTO, BLOCKWISE8, FP16, NONE, TOPK, Codec
from core.trust.identity import Identity

CONFIG = AveragerConfig(chunk_bytes=4096 * 4)
"""Chunks of 4,096 values."""
VERIFIED = replace(CONFIG, verification=VerificationConfig(enabled=True))


def group_of(roles: str, **announced: float) -> GroupSpec:
    members = [
        MemberInfo(
            Identity.generate().peer_id, [], client=r == "c", reduce_only=r == "a", **announced
        )
        for r in roles
    ]
    return GroupSpec(b"group-id-sixteen", "grads.1", members)


def plans_for(
    roles: str,
    sizes: Sequence[int] = (1000,),
    config: AveragerConfig = CONFIG,
    weight: float = 1.0,
) -> list[RoundPlan]:
    """Every member's plan of one round of the group ``roles``."""
    group = group_of(roles)
    return [plan_round(group, i, sizes, weight=weight, config=config) for i in range(len(roles))]


@pytest.mark.parametrize(
    ("roles", "total", "parts"),
    [
        ("tttt", 1000, (250, 250, 250, 250)),
        ("tct", 1000, (500, 0, 500)),  # a client reduces nothing
        ("tta", 999, (333, 333, 333)),  # an reduce-only member reduces its share
        ("tcta", 900, (300, 0, 300, 300)),
        ("tt", 7, (4, 3)),  # whole values: the remainder goes to the first
        ("cc", 10, (5, 5)),  # nobody can be dialed: everyone reduces rather than no one
    ],
)
def test_parts_per_member(roles: str, total: int, parts: tuple[int, ...]) -> None:
    for plan in plans_for(roles, sizes=[total]):
        assert plan.parts == parts
        assert plan.reducers == {j for j, size in enumerate(parts) if size}
        assert [sum(span.count for span in spans) for spans in plan.spans] == list(parts)


@pytest.mark.parametrize(
    ("roles", "senders", "receivers", "reducers"),
    [
        ("ttt", {0, 1, 2}, {0, 1, 2}, {0, 1, 2}),
        ("tct", {0, 1, 2}, {0, 1, 2}, {0, 2}),  # a client sends and receives, reduces nothing
        (
            "tta",
            {0, 1},
            {0, 1},
            {0, 1, 2},
        ),  # an reduce-only member reduces, sends and takes nothing
        ("acta", {1, 2}, {1, 2}, {0, 2, 3}),
    ],
)
def test_who_sends_receives_and_reduces(
    roles: str, senders: set[int], receivers: set[int], reducers: set[int]
) -> None:
    for plan in plans_for(roles):
        assert plan.senders == senders
        assert plan.receivers == receivers
        assert plan.reducers == reducers


@pytest.mark.parametrize(
    ("roles", "index", "claimed", "weight"),
    [
        ("tt", 0, 32.0, 32.0),
        ("tt", 1, 0.0, 0.0),  # a member without data (the backbone) still takes the averages
        ("tc", 1, 7, 7.0),
        ("ta", 1, 32.0, 0.0),  # an reduce-only member's claim counts for nothing
    ],
)
def test_a_members_weight(roles: str, index: int, claimed: float, weight: float) -> None:
    group = group_of(roles)
    plan = plan_round(group, index, [1000], weight=claimed, config=CONFIG)
    assert plan.weight == weight
    # the rule a reducer applies to this member's claim is the one it applied to itself
    others = plan_round(group, 1 - index, [1000], weight=1.0, config=CONFIG)
    assert others.weight_of(index, claimed) == weight


@pytest.mark.parametrize(
    ("weight", "lands"), [(0.0, False), (-1.0, False), (1e-9, True), (32.0, True)]
)
def test_a_chunk_lands_when_some_weight_reached_its_reducer(weight: float, lands: bool) -> None:
    (plan, _) = plans_for("tt")
    assert plan.lands(weight) is lands


@pytest.mark.parametrize(
    ("roles", "config", "checks"),
    [
        ("ttt", VERIFIED, [(1, 2), (0, 2), (0, 1)]),
        ("tct", VERIFIED, [(2,), (0, 2), (0,)]),  # the client's part is empty: nothing to check
        ("tta", VERIFIED, [(1, 2), (0, 2), ()]),  # the reduce-only member holds no seals to check
        ("ttt", CONFIG, [(), (), ()]),  # reducers not verified: nobody checks
    ],
)
def test_who_may_check_which_part(
    roles: str, config: AveragerConfig, checks: list[tuple[int, ...]]
) -> None:
    for plan in plans_for(roles, config=config):
        assert plan.verified is config.verification.enabled
        assert [plan.checks(member) for member in range(len(roles))] == checks
        assert plan.verifiers == {m for m, parts in enumerate(checks) if parts}
        assert plan.check_pairs == sum(len(parts) for parts in checks)


@pytest.mark.parametrize(
    ("codec", "sizes", "sent", "returned"),
    [
        (NONE, [70_000, 100], [NONE, NONE], [NONE, NONE]),
        (AUTO, [70_000, 100], [BLOCKWISE8, FP16], [BLOCKWISE8, FP16]),  # by each tensor's size
        (TOPK, [70_000], [TOPK], [TOPK.for_sum(2)]),  # a sparse mean goes back denser
    ],
)
def test_each_tensor_travels_in_its_codec(
    codec: Codec, sizes: list[int], sent: list[Codec], returned: list[Codec]
) -> None:
    (plan, _) = plans_for("tt", sizes=sizes, config=replace(CONFIG, codec=codec))
    spans = [span for part in plan.spans for span in part]
    for tensor, (there, back) in enumerate(zip(sent, returned, strict=True)):
        # by name: a sparse codec's mean codec is made anew for each group size
        assert {span.codec.name for span in spans if span.tensor == tensor} == {there.name}
        assert {span.returned.name for span in spans if span.tensor == tensor} == {back.name}


@pytest.mark.parametrize(
    ("sizes", "announced", "chunk"),
    [
        ([70_000, 100], {}, 4096),  # chunk_bytes / 4
        ([70_000], {"upload": 2.5e6, "download": 2.5e6}, 16_384),  # the 64 KiB floor, in values
    ],
)
def test_chunks_never_cross_a_tensor_and_shrink_with_slow_links(
    sizes: list[int], announced: dict[str, float], chunk: int
) -> None:
    config = replace(CONFIG, chunk_bytes=1 << 20) if announced else CONFIG
    plan = plan_round(group_of("tt", **announced), 0, sizes, weight=1.0, config=config)
    assert plan.chunk == chunk
    ends = {sum(sizes[: t + 1]) for t in range(len(sizes))}
    for spans in plan.spans:
        for span in spans:
            assert span.count <= chunk
            assert not any(span.start < end < span.end for end in ends)


def test_every_member_plans_the_same_round() -> None:
    plans = plans_for("tcta", sizes=[70_000, 100], config=VERIFIED)
    first = plans[0]
    for index, plan in enumerate(plans):
        assert plan.index == index
        assert (plan.parts, plan.spans, plan.schema, plan.chunk) == (
            first.parts,
            first.spans,
            first.schema,
            first.chunk,
        )
        assert (plan.senders, plan.receivers, plan.verifiers) == (
            first.senders,
            first.receivers,
            first.verifiers,
        )


def test_verified_rounds_agree_on_aggregation_settings_too() -> None:
    clipping = AggregationConfig(method=Method.CENTERED_CLIP)
    schema = {
        (verified, method): plans_for("tt", config=replace(config, aggregation=aggregation))[
            0
        ].schema
        for verified, config in ((False, CONFIG), (True, VERIFIED))
        for method, aggregation in (("mean", AggregationConfig()), ("clip", clipping))
    }
    assert schema[False, "mean"] == schema[False, "clip"]  # unverified: a reducer's own business
    assert schema[True, "mean"] != schema[True, "clip"]  # verifiers recompute with their own
    assert schema[False, "mean"] != schema[True, "mean"]


def test_a_sparse_codec_can_be_verified() -> None:
    # the verifier recomputes in the codec the means go back in (``test_verification``)
    (plan,) = plans_for("tt", config=replace(VERIFIED, codec=TOPK))[:1]
    assert plan.verifiers
