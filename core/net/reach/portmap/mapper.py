"""PortMapper: keep one port forwarded on the home router for as long as the peer listens.

It looks for a NAT-PMP router (at the default gateway) and a UPnP-IGD router (by SSDP) at the same
time, maps the port with the first method in ``methods`` that found one, renews the lease at half its
lifetime in a named background task, and deletes the mapping on ``close()``. When a renewal fails
until the lease runs out, or the router loses the mapping, it reports the loss and from then on
searches again every ``retry_s`` (a rebooted router may come back on another address or port).

"No router", refusals and garbage from the router are expected on most networks: they are logged
with the reason and mean "no mapping"; nothing here raises for them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, Protocol, TypeVar

from core.net.reach.portmap.gateway import default_gateway_ipv4
from core.net.reach.portmap.mapping import Mapping, Method, PortMapError
from core.net.reach.portmap.natpmp import NATPMP_PORT, NatPmpClient
from core.net.reach.portmap.upnp import SSDP_MULTICAST, UpnpIgdClient
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Router(Protocol):
    @property
    def method(self) -> Method: ...

    async def map(
        self, protocol: Literal["TCP", "UDP"], internal_port: int, external_port: int, lease_s: int
    ) -> Mapping: ...

    async def unmap(self, mapping: Mapping) -> None: ...

    async def close(self) -> None: ...


def _same(a: Mapping | None, b: Mapping | None) -> bool:
    """Whether others would see no difference (a renewal only moves ``expires_at``)."""
    if a is None or b is None:
        return a is b
    return (a.external_ip, a.external_port, a.method) == (b.external_ip, b.external_port, b.method)


class PortMapper:
    """Maps ``internal_port`` on the home router while started; see the module docstring.

    ``mapping`` is the current mapping (None when there is none, with ``last_reason`` saying why);
    ``on_change`` is called with the new mapping whenever it is gained, changes address or port, or
    is lost (None), including at ``close()``.
    """

    def __init__(
        self,
        internal_port: int,
        *,
        lease_s: int = 3600,
        description: str = "Barnraise",
        protocol: Literal["TCP", "UDP"] = "TCP",
        on_change: Callable[[Mapping | None], None] | None = None,
        methods: Sequence[Method] = ("natpmp", "upnp"),
        natpmp_gateway: str | None = None,
        natpmp_port: int = NATPMP_PORT,
        ssdp_target: tuple[str, int] = SSDP_MULTICAST,
        ssdp_source: tuple[str, int] = ("0.0.0.0", 0),
        timeout: float = 3.0,
        retry_s: float = 300.0,
    ) -> None:
        """``natpmp_gateway`` None: the default gateway where the platform tells it (Linux);
        ``ssdp_target``/``ssdp_source`` and ``natpmp_port`` exist so that tests reach fake routers
        on loopback; ``timeout`` bounds each search and each request to the router."""
        if not 0 < internal_port < 65536:
            raise ValueError(f"not a port: {internal_port}")
        if lease_s < 2:
            raise ValueError(f"lease_s must be at least 2 s, not {lease_s}")
        self.internal_port = internal_port
        self.lease_s = lease_s
        self.description = description
        self.protocol: Literal["TCP", "UDP"] = protocol
        self.on_change = on_change
        self.methods = tuple(methods)
        self.natpmp_gateway = natpmp_gateway
        self.natpmp_port = natpmp_port
        self.ssdp_target = ssdp_target
        self.ssdp_source = ssdp_source
        self.timeout = timeout
        self.retry_s = retry_s
        self.mapping: Mapping | None = None
        self.last_reason = ""
        """Why there is no mapping, when there is none (for logs and the user's status page)."""
        self._router: _Router | None = None
        self._name = f"portmap:{internal_port}"
        self._tasks = BackgroundTasks(self._name)
        self._started = False

    async def start(self) -> Mapping | None:
        """Search, map, and keep the mapping renewed; None (reason logged) when no router maps it."""
        if self._started:
            raise RuntimeError("PortMapper.start() called twice")
        self._started = True
        mapping = await self._attempt()
        if mapping is not None:
            self._tasks.spawn("renew", self._keep())
        return mapping

    async def close(self) -> None:
        """Stop renewing and delete the mapping on the router (best effort, within ``timeout``)."""
        await self._tasks.close()
        router, mapping = self._router, self.mapping
        self._router = None
        if router is None:
            return
        if mapping is not None:
            try:
                async with asyncio.timeout(self.timeout):
                    await router.unmap(mapping)
                log.info("port mapping: deleted %s", _describe(mapping))
            except (PortMapError, TimeoutError) as exc:
                log.info("port mapping: could not delete %s (%s)", _describe(mapping), exc)
        await router.close()
        self._set(None)

    async def _find(self, method: Method) -> _Router:
        if method == "natpmp":
            gateway = self.natpmp_gateway or default_gateway_ipv4()
            if gateway is None:
                raise PortMapError("NAT-PMP: the default gateway is unknown on this platform")
            client = NatPmpClient(gateway, port=self.natpmp_port, timeout=self.timeout)
            await client.external_address()  # is anyone there?
            return client
        return await UpnpIgdClient.discover(
            target=self.ssdp_target,
            source=self.ssdp_source,
            timeout=self.timeout,
            description=self.description,
        )

    async def _attempt(self) -> Mapping | None:
        """One full try: find routers by every method at once, map with the first that maps."""
        finders = [
            asyncio.create_task(
                self._guarded(self._find(method)), name=f"{self._name}/find-{method}"
            )
            for method in self.methods
        ]
        reasons: list[PortMapError] = []
        mapping = None
        try:
            for found in await asyncio.gather(*finders):
                if isinstance(found, PortMapError):
                    reasons.append(found)
                    continue
                if mapping is None:
                    got = await self._guarded(
                        found.map(
                            self.protocol, self.internal_port, self.internal_port, self.lease_s
                        )
                    )
                    if isinstance(got, PortMapError):
                        reasons.append(got)
                    else:
                        mapping, self._router = got, found
        finally:
            # routers we do not keep hold an HTTP session; found ones count even when cancelled
            for finder in finders:
                finder.cancel()
            await asyncio.wait(finders)
            for finder in finders:
                if not finder.cancelled():
                    router = finder.result()
                    if not isinstance(router, PortMapError) and router is not self._router:
                        await router.close()
        if mapping is None:
            self.last_reason = "; ".join(str(reason) for reason in reasons)
            log.info("port mapping: none for port %d: %s", self.internal_port, self.last_reason)
            return None
        log.info("port mapping: %s", _describe(mapping))
        self._set(mapping)
        return mapping

    async def _guarded(self, work: Awaitable[T]) -> T | PortMapError:
        """Run one step against a router; its failure comes back as the reason, never raised."""
        try:
            return await work
        except PortMapError as exc:
            return exc
        except (
            Exception
        ) as exc:  # a router nobody foresaw, or a library bug, must not stop the peer
            log.warning("port mapping: unexpected failure", exc_info=True)
            return PortMapError(f"unexpected failure: {exc!r}")

    async def _keep(self) -> None:
        """Renew at half the lease; after losing the mapping, search again every ``retry_s``."""
        while True:
            mapping, router = self.mapping, self._router
            if mapping is None or router is None:
                await asyncio.sleep(self.retry_s)
                if router is not None:
                    self._router = None
                    await router.close()
                await self._attempt()
                continue
            await asyncio.sleep(self._renew_in(mapping))
            renewed = await self._guarded(
                router.map(self.protocol, self.internal_port, mapping.external_port, self.lease_s)
            )
            if not isinstance(renewed, PortMapError):
                if not _same(mapping, renewed):
                    log.info("port mapping changed: %s", _describe(renewed))
                self._set(renewed)
            elif mapping.expires_at is None or time.time() >= mapping.expires_at:
                self.last_reason = str(renewed)
                log.warning("port mapping lost: %s (%s)", _describe(mapping), renewed)
                self._set(None)
            else:
                log.info("port mapping: renewal failed, retrying before it expires (%s)", renewed)

    def _renew_in(self, mapping: Mapping) -> float:
        """Half the lease; after a failed renewal (less than half left), half of what is left."""
        if mapping.expires_at is None:
            return self.lease_s / 2
        left = mapping.expires_at - time.time()
        return max(0.0, min(mapping.lifetime_s / 2, left / 2 if left > 1 else left))

    def _set(self, mapping: Mapping | None) -> None:
        changed = not _same(self.mapping, mapping)
        self.mapping = mapping
        if changed and self.on_change is not None:
            try:
                self.on_change(mapping)
            except Exception:
                log.exception("port mapping: the on_change callback failed")


def _describe(mapping: Mapping) -> str:
    lease = f"{mapping.lifetime_s} s" if mapping.lifetime_s else "permanent"
    return (
        f"{mapping.protocol} {mapping.external_ip or '?'}:{mapping.external_port} -> "
        f"port {mapping.internal_port} by {mapping.method} ({lease})"
    )
