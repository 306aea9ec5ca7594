"""UPnP-IGD: finding the router by SSDP and asking its WAN connection service for a port mapping.

Built on ``async-upnp-client`` (asyncio over aiohttp, typed; Home Assistant's UPnP library), which
parses the device and service descriptions and speaks SOAP. We use its generic device and service
objects rather than its ``IgdDevice`` profile, because the profile silently does nothing when a router
lacks an action, and we need to know. Parsing is lenient (``non_strict``): real routers' XML is sloppy.

The SSDP target and source are injectable, so that tests search a fake router on loopback instead of
the LAN's multicast group.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import time
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
from async_upnp_client.aiohttp import AiohttpSessionRequester
from async_upnp_client.client import UpnpService
from async_upnp_client.client_factory import UpnpFactory
from async_upnp_client.exceptions import UpnpActionError, UpnpError
from async_upnp_client.search import SsdpSearchListener
from async_upnp_client.utils import CaseInsensitiveDict

from core.net.reach.portmap.gateway import local_address_towards
from core.net.reach.portmap.mapping import Mapping, PortMapError

log = logging.getLogger(__name__)

SSDP_MULTICAST = ("239.255.255.250", 1900)
_SEARCH_TARGETS = (
    "urn:schemas-upnp-org:device:InternetGatewayDevice:1",
    "urn:schemas-upnp-org:device:InternetGatewayDevice:2",
)
_WAN_SERVICES = (
    "urn:schemas-upnp-org:service:WANIPConnection:2",
    "urn:schemas-upnp-org:service:WANIPConnection:1",
    "urn:schemas-upnp-org:service:WANPPPConnection:1",
)
_CONFLICT = 718  # ConflictInMappingEntry: someone else holds that external port
_SAME_PORT_REQUIRED = 724
_ONLY_PERMANENT = 725  # OnlyPermanentLeasesSupported: lease must be 0 (IGD:1 routers)
_OTHER_PORT_TRIES = 3

# What a router's bad answers raise inside the library: HTTP and SOAP failures (UpnpError, aiohttp),
# values its XML schema checks reject (ValueError), missing result fields (KeyError), sockets (OSError).
_ROUTER_ERRORS = (UpnpError, aiohttp.ClientError, OSError, TimeoutError, ValueError, KeyError)


class UpnpIgdClient:
    method: Literal["upnp"] = "upnp"

    def __init__(
        self,
        session: aiohttp.ClientSession,
        service: UpnpService,
        internal_client: str,
        *,
        description: str,
        timeout: float,
    ) -> None:
        self._session = session
        self._service = service
        self.internal_client = internal_client
        self.description = description
        self.timeout = timeout

    @classmethod
    async def discover(
        cls,
        *,
        target: tuple[str, int] = SSDP_MULTICAST,
        source: tuple[str, int] = ("0.0.0.0", 0),
        timeout: float = 3.0,
        description: str = "Barnraise",
    ) -> UpnpIgdClient:
        """Find the first router that answers the search and offers a WAN connection service."""
        locations: asyncio.Queue[str] = asyncio.Queue()
        seen: set[str] = set()

        def on_response(headers: CaseInsensitiveDict) -> None:
            location = headers.get("location")
            if isinstance(location, str) and location not in seen:
                seen.add(location)
                locations.put_nowait(location)

        listener = SsdpSearchListener(
            callback=on_response,
            source=source,
            target=target,
            timeout=1,  # MX: routers answer within 1 s (a random delay up to MX), inside our timeout
            search_target=_SEARCH_TARGETS[0],
        )

        def search() -> None:
            for search_target in _SEARCH_TARGETS:
                listener.search_target = search_target
                listener.async_search()

        # Plain, not core.util.web_client's: the router is on the LAN, where a proxy would not
        # reach it, and it speaks plain HTTP.
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout))
        reasons: list[str] = []
        handed_over = False
        again: asyncio.TimerHandle | None = None
        try:
            await listener.async_start()
            search()
            # multicast over Wi-Fi is lossy: search once more if nobody answered the first time
            again = asyncio.get_running_loop().call_later(
                min(1.0, timeout / 2), lambda: None if seen else search()
            )
            async with asyncio.timeout(timeout):
                while True:
                    location = await locations.get()
                    try:
                        client = await cls._open(session, location, timeout, description)
                    except PortMapError as exc:
                        reasons.append(str(exc))
                        log.debug("%s", exc)
                        continue
                    handed_over = True  # the client owns the session now
                    return client
        except TimeoutError:
            found = "; ".join(reasons) if reasons else "no router answered"
            raise PortMapError(f"UPnP: no usable gateway within {timeout:g} s ({found})") from None
        except OSError as exc:
            raise PortMapError(f"UPnP: cannot search for a gateway ({exc})") from exc
        finally:
            if again is not None:
                again.cancel()
            listener.async_stop()
            if not handed_over:
                await session.close()

    @classmethod
    async def _open(
        cls, session: aiohttp.ClientSession, location: str, timeout: float, description: str
    ) -> UpnpIgdClient:
        factory = UpnpFactory(
            AiohttpSessionRequester(session, timeout=max(1, int(timeout))), non_strict=True
        )
        try:
            device = await factory.async_create_device(location)
        except _ROUTER_ERRORS as exc:
            raise PortMapError(f"UPnP: unusable description at {location} ({exc!r})") from exc
        by_type = {service.service_type: service for service in device.all_services}
        for service_type in _WAN_SERVICES:
            service = by_type.get(service_type)
            if service is not None and service.has_action("AddPortMapping"):
                host = urlsplit(service.control_url or location).hostname or ""
                try:
                    internal_client = local_address_towards(host)
                except OSError as exc:
                    raise PortMapError(f"UPnP: no route to the router {host!r} ({exc})") from exc
                log.debug("UPnP gateway %s, service %s", location, service_type)
                return cls(
                    session, service, internal_client, description=description, timeout=timeout
                )
        raise PortMapError(f"UPnP: {location} offers no WAN connection service with AddPortMapping")

    async def _call(self, action_name: str, **arguments: Any) -> dict[str, Any]:
        if not self._service.has_action(action_name):
            raise PortMapError(f"UPnP: the router has no {action_name} action")
        try:
            async with asyncio.timeout(self.timeout):
                result = await self._service.action(action_name).async_call(**arguments)
        except UpnpActionError as exc:
            raise _ActionRefused(action_name, exc.error_code, exc.error_desc) from exc
        except _ROUTER_ERRORS as exc:
            raise PortMapError(f"UPnP: {action_name} failed ({exc!r})") from exc
        return dict(result)

    async def map(
        self, protocol: Literal["TCP", "UDP"], internal_port: int, external_port: int, lease_s: int
    ) -> Mapping:
        """Ask for ``external_port``; on a conflict try a few random ones, on 725 a permanent lease."""
        ports = [external_port] + [random.randint(1024, 65535) for _ in range(_OTHER_PORT_TRIES)]
        lease = lease_s
        while ports:
            port = ports[0]
            try:
                await self._call(
                    "AddPortMapping",
                    NewRemoteHost="",
                    NewExternalPort=port,
                    NewProtocol=protocol,
                    NewInternalPort=internal_port,
                    NewInternalClient=self.internal_client,
                    NewEnabled=True,
                    NewPortMappingDescription=self.description,
                    NewLeaseDuration=lease,
                )
            except _ActionRefused as exc:
                if exc.code == _ONLY_PERMANENT and lease != 0:
                    lease = 0
                    continue
                if exc.code == _CONFLICT and len(ports) > 1:
                    ports.pop(0)
                    continue
                raise
            break
        return Mapping(
            protocol=protocol,
            external_ip=await self._external_ip(),
            external_port=port,
            internal_port=internal_port,
            method=self.method,
            lifetime_s=lease,
            expires_at=time.time() + lease if lease else None,
        )

    async def _external_ip(self) -> str | None:
        """The router's WAN address, or None (logged) when it cannot or will not say."""
        try:
            result = await self._call("GetExternalIPAddress")
            return str(ipaddress.ip_address(str(result.get("NewExternalIPAddress"))))
        except (PortMapError, ValueError) as exc:
            log.info("UPnP: the router did not tell its external address (%s)", exc)
            return None

    async def unmap(self, mapping: Mapping) -> None:
        await self._call(
            "DeletePortMapping",
            NewRemoteHost="",
            NewExternalPort=mapping.external_port,
            NewProtocol=mapping.protocol,
        )

    async def close(self) -> None:
        await self._session.close()


class _ActionRefused(PortMapError):
    """The router answered a SOAP fault; ``code`` is the UPnP error code (718, 725, 606...)."""

    def __init__(self, action: str, code: int | None, description: str | None) -> None:
        super().__init__(f"UPnP: the router refused {action}: error {code} ({description})")
        self.code = code
