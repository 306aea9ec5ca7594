"""Mapping: a port forwarding that a home router granted us, and PortMapError: why it did not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Method = Literal["upnp", "natpmp"]


class PortMapError(Exception):
    """The router is absent, refused, or answered something we cannot use; the message says which.

    Never fatal: port mapping is an optional help, so the mapper logs it and carries on without one.
    """


@dataclass(frozen=True)
class Mapping:
    """A forwarding of ``external_ip:external_port`` on the router to our ``internal_port``."""

    protocol: Literal["TCP", "UDP"]
    external_ip: str | None
    """What the router says its WAN address is (None if it would not say). It may itself be private
    (double NAT, carrier-grade NAT), so only a dial-back from outside proves the mapping works."""
    external_port: int
    internal_port: int
    method: Method
    lifetime_s: int
    """Seconds the router granted; 0 means permanent (until deleted), which some UPnP routers insist on."""
    expires_at: float | None
    """Wall-clock time (Unix seconds) when the lease ends unless renewed; None when permanent."""
