"""The averager: what the training loop calls to average tensors with peers.

    result = await averager.average(tensors, weight=samples, round_key="grads.17")

or in two steps, so that finding a group overlaps with computing:

    pending = await averager.prepare("grads.17")      # matchmaking now
    ...                                                # finish the local batch
    result = await pending.run(tensors, weight=samples)  # all-reduce when ready

``tensors`` are averaged in place (torch tensors or numpy arrays), weighted by ``weight``; ``result`` says
exactly what was averaged (see ``AveragingResult``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from core.averaging.allreduce import AllReduce
from core.averaging.bans import BanList
from core.averaging.config import AveragerConfig
from core.averaging.matchmaking import Matchmaker, MatchmakingError
from core.averaging.messages import (
    REDUCE,
    VERIFY,
    GroupSpec,
    MemberInfo,
    ReduceRequest,
    ReduceSummary,
    VerifyReply,
    VerifyRequest,
)
from core.averaging.registry import RoundRegistry
from core.averaging.result import AveragingResult
from core.averaging.robust.medians import typical_claim
from core.averaging.round.checks import PROVEN
from core.averaging.round.columns import ColumnRequest, Columns
from core.averaging.round.load_balancing import PlanCache
from core.averaging.round.tensors import TensorSet
from core.averaging.verified.retained import RetainedRounds
from core.codecs import Codec
from core.codecs.arrays import F32
from core.codecs.chunks import warm_up
from core.dht import DHTNode
from core.net.errors import NotFoundError
from core.net.host.address import PeerAddress
from core.net.host.host import Host
from core.net.wire.rpc import CallContext
from core.net.wire.stream import Stream
from core.util.errors import BarnraiseError, ConfigError

log = logging.getLogger(__name__)


class PendingRound:
    """A group found for one round, waiting for this member to start its all-reduce."""

    def __init__(
        self,
        averager: Averager,
        group: GroupSpec,
        columns: ColumnRequest | None = None,
        column: bool = False,
    ) -> None:
        """``column``: a column's round, whose senders are groups' reducers, not members."""
        self.group = group
        self._averager = averager
        self._columns = columns
        self._column = column
        peers = [m.peer for m in group.members]
        self.index = peers.index(averager.host.peer_id)
        self._used = False

    @property
    def size(self) -> int:
        return len(self.group.members)

    async def run(
        self,
        tensors: Sequence[Any],
        weight: float = 1.0,
        *,
        codec: Codec | None = None,
        feedback: Sequence[Any] | None = None,
    ) -> AveragingResult:
        """Average ``tensors`` in place with the group (once).

        ``codec`` overrides the configured one for this round (every member must pass the same,
        e.g. ``core.codecs.NONE`` for parameters that must not lose precision). ``feedback``
        (CPU float32 arrays shaped like ``tensors``) receives what the codec left out of what we
        sent, for error feedback (``round.feedback``).
        """
        if self._used:
            raise BarnraiseError("this round has already been run")
        self._used = True
        averager = self._averager
        runner = AllReduce(
            averager.host,
            self.group,
            self.index,
            TensorSet(tensors),
            weight=weight,
            config=averager.round_config(codec, self.group, column=self._column),
            plans=averager.plans,
            feedback=None if feedback is None else TensorSet(feedback),
            columns=averager.columns(self._columns, self.group),
        )
        if averager.round_hook is not None:
            averager.round_hook(runner)
        averager.registry.start(self.group.group_id, runner)
        if runner.verification is not None:
            averager.retained.running(self.group.group_id, runner.verification)
        try:
            result = await runner.run()
        finally:
            averager.registry.end(self.group.group_id)
            averager.retained.ended(self.group.group_id)
        averager.observe(result)
        return result

    def cancel(self) -> None:
        """Do not run this round; members waiting on us give up at their timeouts."""
        self._used = True
        self._averager.registry.end(self.group.group_id)


class Averager:
    def __init__(
        self, host: Host, dht: DHTNode, prefix: str = "avg", config: AveragerConfig | None = None
    ) -> None:
        self.host = host
        self.dht = dht
        self.prefix = prefix
        self.config = config or AveragerConfig()
        self.registry = RoundRegistry()
        self.plans = PlanCache()
        warm_up(self.config.codec)
        self.bans = BanList()
        """Members this peer caught lying (verified reducers): it does not group with them."""
        self.retained = RetainedRounds()
        self.round_hook: Callable[[AllReduce], object] | None = None
        """Called with each round before it runs; only the demo's lying reducer sets it
        (``core.swarm.byzantine``), to show reducer verification at work."""
        self.confirmed_claim: Callable[[], float | None] | None = None
        """The typical claim of the collaboration's last confirmed round, read as each round
        starts (``round_config``); set by a training mode that holds one (diloco); None, or a call
        returning None: the group's declared weights alone."""
        self.matchmaker = Matchmaker(
            host,
            dht,
            prefix,
            self.config,
            registry=self.registry,
            info=self.member_info,
            banned=self.bans.__contains__,
        )
        host.router.add_stream(REDUCE, self._on_reduce)
        host.router.add_stream(VERIFY, self._on_verify)
        self._failure_rate = 0.0

    def set_client_mode(self, client: bool) -> None:
        """Become a client (send and receive, reduce nothing, never lead) or a full member again.

        Used when our reachability changes: a peer others cannot dial directly must not take a
        share of the reduction. Takes effect from the next group search; a search already under way
        keeps the role it declared.
        """
        if client == self.config.client_mode:
            return
        if client and self.config.reduce_only:
            raise ConfigError("a reduce-only member must accept connections (it reduces)")
        self.config = replace(self.config, client_mode=client)

    @property
    def failure_rate(self) -> float:
        """The share of other members that failed a round, averaged over recent rounds (DeDLOC
        Appendix C's p, which sets the Moshpit group size)."""
        return self._failure_rate

    def observe(self, result: AveragingResult) -> None:
        for finding in result.findings:
            if finding.statistic in PROVEN and finding.peer != self.host.peer_id:
                seconds = self.config.verification.ban_seconds
                self.bans.ban(finding.peer, seconds, finding.reason)
        others = len(result.members) - 1
        if others <= 0:
            return
        failed = len(result.failed_members() - {self.host.peer_id})
        self._failure_rate = 0.8 * self._failure_rate + 0.2 * min(1.0, failed / others)

    def member_info(self) -> MemberInfo:
        config = self.config
        return MemberInfo(
            self.host.peer_id,
            # a client's addresses (relays, its LAN) let peers meet it; its flag keeps parts away
            [str(a) for a in self.host.addresses],
            config.compute,
            config.upload,
            config.download,
            config.client_mode,
            config.reduce_only,
        )

    async def prepare(
        self,
        round_key: str = "",
        *,
        timeout: float | None = None,
        target_size: int | None = None,
        weight: float = 0.0,
        enough: float | None = None,
        columns: ColumnRequest | None = None,
        uncapped: bool = False,
        rank: int | None = None,
    ) -> PendingRound:
        """Find a group for ``round_key``; raises ``MatchmakingError`` if none forms in time.

        ``target_size`` closes the group early at that many members (never above the config's,
        unless ``uncapped``). ``weight`` is what we will bring; ``enough``, the weight a group
        should hold before its leader stops waiting for ``target_size`` members
        (``Matchmaker.form_group``). ``columns``: the round may form several groups, which then
        average their slots across groups (``round.columns``). ``rank``: our place in a group
        the caller planned (``Matchmaker.form_group``).
        """
        timeout = self.config.max_matchmaking_time if timeout is None else timeout
        self.matchmaker.reconfigure(self.config)  # a role changed since the last round
        slots = (columns.slots, columns.groups) if columns is not None else (0, 0)
        group = await self.matchmaker.form_group(
            round_key or "default", timeout, target_size, weight=weight, enough=enough,
            uncapped=uncapped, slots=slots, rank=rank,
        )  # fmt: skip
        pending = PendingRound(self, group, columns, column=uncapped)
        try:
            await self._connect_ahead(group)
        except BaseException:
            pending.cancel()  # nobody will run it: do not keep it registered
            raise
        return pending

    async def _connect_ahead(self, group: GroupSpec) -> None:
        """Open the connections the all-reduce will use now, so that it starts without handshakes."""
        me = self.host.peer_id
        if self.config.reduce_only:
            return  # a reduce-only member only answers
        targets = []
        for member in group.members:
            if member.peer == me:
                continue
            addresses = PeerAddress.of_peer(member.peer, member.addresses)
            if addresses:
                self.host.add_addresses(member.peer, addresses)
            if not member.client:
                targets.append(member.peer)
        if targets:
            try:
                async with asyncio.timeout(self.config.request_timeout):
                    await asyncio.gather(
                        *(self.host.connect(peer) for peer in targets), return_exceptions=True
                    )
            except TimeoutError:
                pass  # the all-reduce will try again and report whoever stays unreachable

    async def average(
        self,
        tensors: Sequence[Any],
        *,
        weight: float = 1.0,
        round_key: str = "",
        timeout: float | None = None,
        target_size: int | None = None,
        enough: float | None = None,
        codec: Codec | None = None,
        feedback: Sequence[Any] | None = None,
        columns: ColumnRequest | None = None,
        uncapped: bool = False,
        rank: int | None = None,
    ) -> AveragingResult:
        """Find a group and average ``tensors`` with it, in place (``PendingRound.run``)."""
        pending = await self.prepare(
            round_key, timeout=timeout, target_size=target_size, weight=weight, enough=enough,
            columns=columns, uncapped=uncapped, rank=rank,
        )  # fmt: skip
        return await pending.run(tensors, weight, codec=codec, feedback=feedback)

    def round_config(
        self, codec: Codec | None, group: GroupSpec, *, column: bool = False
    ) -> AveragerConfig:
        """The configuration one round runs with: ``codec`` for this round, and the round's typical
        claim (``AggregationConfig.typical_claim``): ``medians.typical_claim`` of the weights
        ``group``'s members declared, held by the last confirmed round's (``confirmed_claim``).
        Not in a column's round (its senders are groups, whose weights are a group's), nor in
        verified rounds: a verifier recomputing a reducer's chunk must reach the same verdicts,
        and it may have read another confirmation."""
        config = self.config if codec is None else replace(self.config, codec=codec)
        if column or config.verification.enabled:
            return config
        confirmed = self.confirmed_claim() if self.confirmed_claim is not None else None
        if confirmed is not None and not (math.isfinite(confirmed) and confirmed > 0):
            confirmed = None
        declared = [m.weight for m in group.members if math.isfinite(m.weight) and m.weight > 0]
        if not declared and confirmed is None:
            return config
        claim = typical_claim(declared, confirmed)
        return replace(config, aggregation=replace(config.aggregation, typical_claim=claim))

    def columns(self, request: ColumnRequest | None, group: GroupSpec) -> Columns | None:
        """How ``group``'s reducers meet the other groups' (None: its leader dealt no slots)."""
        if request is None or not group.slots:
            return None
        key = f"{request.key}.column"

        def timeout() -> float:
            if request.until is None:
                return request.timeout
            left = request.until - asyncio.get_running_loop().time()
            return max(0.0, min(request.timeout, left))

        async def combine(
            slot: int, values: list[F32], weight: float, codec: Codec
        ) -> AveragingResult | None:
            try:
                # no weight is enough short of every group: the column's leader waits for the
                # groups the caller expects until the column's timeout, not only its patience.
                # A group short of members closes at its own leader's patience, and so comes to
                # the columns about one patience after the others: columns that closed at
                # theirs would leave it out by a hair, and the groups would land different means
                return await self.average(
                    values, weight=weight, round_key=f"{key}{slot}", timeout=timeout(),
                    target_size=request.groups, enough=math.inf, codec=codec, uncapped=True,
                    rank=request.rank,
                )  # fmt: skip
            except MatchmakingError as exc:
                log.info("slot %d of %s met no other group: %s", slot, group.round_key, exc)
                return None

        # a member waits for a slot's first mean as long as the column's matchmaking may take,
        # and the column's own round after it
        seconds = timeout() + self.config.allreduce_timeout
        return Columns(group.slots, combine, seconds)

    async def _on_reduce(
        self, ctx: CallContext, request: ReduceRequest, stream: Stream
    ) -> ReduceSummary:
        runner = await self.registry.wait(request.group_id, self.config.reducer_timeout)
        return await runner.serve(ctx, request, stream)

    async def _on_verify(
        self, ctx: CallContext, request: VerifyRequest, stream: Stream
    ) -> VerifyReply:
        verification = self.retained.get(request.group_id)
        if verification is None:
            raise NotFoundError("this peer keeps no inputs of that round (over, or not verified)")
        return await verification.serve(ctx.peer, request, stream)

    async def close(self) -> None:
        await self.matchmaker.close()
        self.host.router.remove(REDUCE.name)
        self.host.router.remove(VERIFY.name)
        self.retained.close()
        await asyncio.sleep(0)
