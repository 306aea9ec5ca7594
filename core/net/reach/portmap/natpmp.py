"""NAT-PMP (RFC 6886): asking the default gateway for a port mapping with two tiny UDP messages.

Our own client, not a library: the protocol is a dozen bytes each way, and the PyPI clients are
blocking (``NAT-PMP`` needs ``netifaces``, unmaintained and without wheels for current Pythons on
Windows; ``py-natpmp`` is a beta last released in 2023). Most routers that speak PCP (RFC 6887, its
successor) still answer NAT-PMP, since PCP servers must answer version-0 requests.

Requests are retransmitted as the RFC says (250 ms, doubling), within a deadline that the caller sets,
far shorter than the RFC's 64 s: a router that has not answered in a few seconds is not there.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import struct
import time
from typing import Literal

from core.net.reach.portmap.mapping import Mapping, PortMapError

log = logging.getLogger(__name__)

NATPMP_PORT = 5351
_OP_EXTERNAL_ADDRESS = 0
_OP_MAP = {"UDP": 1, "TCP": 2}
_RESULTS = {
    1: "unsupported version",
    2: "not authorized or refused (port mapping may be switched off on the router)",
    3: "network failure (the router has no WAN address yet)",
    4: "out of resources (no ports left)",
    5: "unsupported opcode",
}


class _Exchange(asyncio.DatagramProtocol):
    """One request's socket: keeps the first well-formed answer to the expected opcode."""

    def __init__(self, opcode: int) -> None:
        self.opcode = opcode
        self.answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        # the socket is connected to the gateway, so the kernel already dropped other senders
        if (
            len(data) >= 4
            and data[0] == 0
            and data[1] == 128 + self.opcode
            and not self.answer.done()
        ):
            self.answer.set_result(data)

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable: nothing listens on 5351, no point retrying
        if not self.answer.done():
            self.answer.set_exception(
                PortMapError(f"NAT-PMP: the gateway does not speak it ({exc})")
            )


class NatPmpClient:
    method: Literal["natpmp"] = "natpmp"

    def __init__(self, gateway: str, *, port: int = NATPMP_PORT, timeout: float = 3.0) -> None:
        self.gateway = gateway
        self.port = port
        self.timeout = timeout

    async def _request(self, payload: bytes, opcode: int, timeout: float) -> bytes:
        loop = asyncio.get_running_loop()
        try:
            transport, exchange = await loop.create_datagram_endpoint(
                lambda: _Exchange(opcode), remote_addr=(self.gateway, self.port)
            )
        except OSError as exc:
            raise PortMapError(f"NAT-PMP: cannot reach {self.gateway} ({exc})") from exc
        try:
            delay = 0.25
            async with asyncio.timeout(timeout):
                while True:
                    transport.sendto(payload)
                    done, _ = await asyncio.wait([exchange.answer], timeout=delay)
                    if done:
                        answer = exchange.answer.result()
                        break
                    delay *= 2
        except TimeoutError:
            raise PortMapError(
                f"NAT-PMP: no answer from {self.gateway}:{self.port} within {timeout:g} s"
            ) from None
        finally:
            transport.close()
            if not exchange.answer.done():
                exchange.answer.cancel()
        result = struct.unpack_from("!H", answer, 2)[0]
        if result != 0:
            reason = _RESULTS.get(result, "unknown error")
            raise PortMapError(f"NAT-PMP: {self.gateway} refused: result {result}, {reason}")
        return answer

    async def external_address(self) -> str:
        """The router's WAN address; doubles as the check that a NAT-PMP router is there."""
        answer = await self._request(bytes([0, _OP_EXTERNAL_ADDRESS]), 0, self.timeout)
        if len(answer) < 12:
            raise PortMapError(f"NAT-PMP: external address answer too short ({len(answer)} bytes)")
        return str(ipaddress.IPv4Address(answer[8:12]))

    async def map(
        self, protocol: Literal["TCP", "UDP"], internal_port: int, external_port: int, lease_s: int
    ) -> Mapping:
        """Ask for ``external_port`` (the router may give another) forwarded to our ``internal_port``."""
        external_ip = await self.external_address()
        opcode = _OP_MAP[protocol]
        request = struct.pack("!BBHHHI", 0, opcode, 0, internal_port, external_port, lease_s)
        answer = await self._request(request, opcode, self.timeout)
        if len(answer) < 16:
            raise PortMapError(f"NAT-PMP: mapping answer too short ({len(answer)} bytes)")
        got_internal, got_external, lifetime = struct.unpack_from("!HHI", answer, 8)
        if got_internal != internal_port or not 0 < got_external < 65536 or lifetime == 0:
            raise PortMapError(
                f"NAT-PMP: unusable mapping answer (internal {got_internal}, external "
                f"{got_external}, lifetime {lifetime} s) for internal port {internal_port}"
            )
        return Mapping(
            protocol=protocol,
            external_ip=external_ip,
            external_port=got_external,
            internal_port=internal_port,
            method=self.method,
            lifetime_s=lifetime,
            expires_at=time.time() + lifetime,
        )

    async def unmap(self, mapping: Mapping) -> None:
        """Delete the mapping (RFC 6886 3.4: lifetime 0, external port 0)."""
        opcode = _OP_MAP[mapping.protocol]
        request = struct.pack("!BBHHHI", 0, opcode, 0, mapping.internal_port, 0, 0)
        await self._request(request, opcode, self.timeout)

    async def close(self) -> None:
        """Nothing held between requests: each one opens and closes its own socket."""
