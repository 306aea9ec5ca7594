"""Settings of the networking layer, with the reason for each default."""

from __future__ import annotations

from dataclasses import dataclass

from core.util.errors import ConfigError

MiB = 1024 * 1024


@dataclass(frozen=True)
class NetConfig:
    """Limits and timeouts of a Host. All sizes in bytes, all times in seconds."""

    max_frame_bytes: int = 8 * MiB
    """Hard limit on one frame; a longer frame closes the connection before anything is allocated."""
    stream_chunk_bytes: int = 1 * MiB
    """Raw stream data is cut into frames of this size: large enough to keep per-frame work negligible."""
    stream_window_bytes: int = 16 * MiB
    """How much stream data a peer may send us before we acknowledge it (per stream)."""
    dial_timeout: float = 10.0
    handshake_timeout: float = 10.0
    """TLS handshake plus the hello exchange; a peer that sends nothing is dropped after this."""
    call_timeout: float = 30.0
    """Default deadline of a call when the caller gives none."""
    idle_timeout: float = 120.0
    """A connection with no calls and no traffic for this long is closed."""
    close_grace: float = 2.0
    """On close, how long running handlers may finish before they are cancelled."""
    max_concurrent_calls: int = 512
    """Calls a peer may have running at once on one connection; more are refused as busy."""
    socket_buffer_bytes: int | None = 4 * MiB
    """Kernel send and receive buffers per connection (None: the OS default and its autotuning).
    Large fixed buffers keep bulk streams flowing from their first byte and spare asyncio copies of
    data the kernel could not take yet; the OS may cap them (net.core.wmem_max / rmem_max)."""
    max_unsent_bytes: int = 64 * MiB
    """Replies queued for a peer that does not read them; beyond this its connection is dropped."""
    max_pending_handshakes: int = 256
    """Inbound connections still handshaking at once; beyond it the oldest handshake of the most
    crowded network prefix is dropped for the newcomer (``core.net.host.admission``)."""
    max_pending_per_ip: int = 64
    """Handshakes at once from one address; beyond it that address's oldest one is dropped."""
    max_pending_per_prefix: int = 128
    """Handshakes at once from one /24 (IPv4) or /56 (IPv6); beyond it that prefix's oldest goes."""
    max_connections: int = 1024
    """Authenticated connections at once; a new one beyond it closes the connection idle longest,
    and is itself refused when every connection is busy with calls."""
    upload_limit: float | None = None
    download_limit: float | None = None
    """Bytes per second over all connections (None: unlimited); ``Host.set_bandwidth_limits``
    changes them while running."""

    def __post_init__(self) -> None:
        if self.max_frame_bytes < 64 * 1024:
            raise ConfigError("max_frame_bytes must be at least 64 KiB")
        if not 4096 <= self.stream_chunk_bytes <= self.max_frame_bytes:
            raise ConfigError("stream_chunk_bytes must be between 4 KiB and max_frame_bytes")
        if self.stream_window_bytes < self.stream_chunk_bytes:
            raise ConfigError("stream_window_bytes must be at least one chunk")
        if self.max_unsent_bytes < 4 * self.stream_chunk_bytes:
            raise ConfigError("max_unsent_bytes must hold at least four stream chunks")
        for name in ("dial_timeout", "handshake_timeout", "call_timeout", "idle_timeout"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        for name in ("upload_limit", "download_limit"):
            limit = getattr(self, name)
            if limit is not None and not limit > 0:
                raise ConfigError(f"{name} must be a positive number of bytes per second, or None")
        limits = (
            self.max_concurrent_calls,
            self.max_pending_handshakes,
            self.max_pending_per_ip,
            self.max_pending_per_prefix,
            self.max_connections,
        )
        if min(limits) < 1:
            raise ConfigError("concurrency and connection limits must be at least 1")
