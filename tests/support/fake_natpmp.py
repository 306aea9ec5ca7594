"""A NAT-PMP router on loopback for tests: answers RFC 6886 requests, and misbehaves on request."""

from __future__ import annotations

import asyncio
import ipaddress
import struct
from dataclasses import dataclass, field
from typing import cast


@dataclass
class FakeNatPmp(asyncio.DatagramProtocol):
    external_ip: str = "203.0.113.7"
    result: int = 0
    """The result code of every answer (0 success, 2 refused, ...)."""
    granted_lifetime: int | None = None
    """Grant this lifetime instead of the one asked for."""
    port_offset: int = 0
    """Give ``asked + port_offset`` as the external port (the asked one is taken)."""
    malformed: bool = False
    """Answer with a truncated datagram."""
    silent: bool = False
    requests: list[tuple[int, int, int, int]] = field(default_factory=list)
    """Mapping requests: (opcode, internal port, external port, lifetime)."""
    mappings: dict[int, int] = field(default_factory=dict)
    """Internal port -> external port, as the router holds them."""
    transport: asyncio.DatagramTransport | None = None

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: self, local_addr=("127.0.0.1", 0))
        assert self.transport is not None
        port: int = self.transport.get_extra_info("sockname")[1]
        return port

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        assert self.transport is not None
        if self.silent or len(data) < 2:
            return
        opcode = data[1]
        if self.malformed:
            self.transport.sendto(bytes([0, 128 + opcode, 0]), addr)
            return
        head = struct.pack("!BBHI", 0, 128 + opcode, self.result, 1234)
        if opcode == 0:
            self.transport.sendto(head + ipaddress.IPv4Address(self.external_ip).packed, addr)
            return
        _, _, _, internal, external, lifetime = struct.unpack("!BBHHHI", data[:12])
        self.requests.append((opcode, internal, external, lifetime))
        if self.result == 0:
            if lifetime == 0:
                self.mappings.pop(internal, None)
            else:
                external = external + self.port_offset
                lifetime = self.granted_lifetime or lifetime
                self.mappings[internal] = external
        self.transport.sendto(head + struct.pack("!HHI", internal, external, lifetime), addr)
