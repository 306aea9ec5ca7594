"""Tiny network probes run inside the lab's namespaces (stdlib only, one mode per run).

    tcp-server HOST PORT            accept forever; tell each client the address it came from
    tcp-client HOST PORT TIMEOUT    "OK <address the server saw>" or "FAIL <error>" (exit 1)
    tcp-punch LPORT PEER DURATION   TCP simultaneous open from a fixed local port, retried
    udp-reflector HOST:PORT...      STUN-like: answer each datagram with the sender's address
    udp-mapped LPORT HOST:PORT...   from one local port, ask each reflector for our mapping
    tcp-rate PORT SECONDS           accept one client, print the kbit/s it sent over SECONDS
    tcp-flood HOST PORT             send as fast as the network takes it, until killed

Servers print "listening" once they accept, so the caller knows when to start the other side.
"""

from __future__ import annotations

import select
import socket
import sys
import time
from collections.abc import Callable


def out(text: str) -> None:
    print(text, flush=True)


def split(host_port: str) -> tuple[str, int]:
    host, port = host_port.rsplit(":", 1)
    return host, int(port)


def tcp_server(host: str, port: int) -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(16)
    out("listening")
    while True:
        conn, addr = server.accept()
        conn.sendall(f"{addr[0]}:{addr[1]}\n".encode())
        conn.close()


def tcp_client(host: str, port: int, timeout: float) -> int:
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            out("OK " + conn.recv(100).decode().strip())
            return 0
    except OSError as exc:
        out(f"FAIL {type(exc).__name__} {exc.strerror or ''}".strip())
        return 1


def tcp_punch(lport: int, peer: str, duration: float) -> int:
    host, port = split(peer)
    end = time.monotonic() + duration
    while time.monotonic() < end:
        conn = socket.socket()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        conn.bind(("0.0.0.0", lport))
        conn.settimeout(0.5)
        try:
            conn.connect((host, port))
            conn.sendall(b"hello")
            data = conn.recv(10)
            if data == b"hello":
                local, remote = conn.getsockname(), conn.getpeername()
                out(f"OK {local[0]}:{local[1]} -> {remote[0]}:{remote[1]}")
                conn.close()
                return 0
        except OSError:
            pass
        conn.close()
        time.sleep(0.05)
    out("FAIL no simultaneous open")
    return 1


def udp_reflector(endpoints: list[str]) -> None:
    socks = []
    for endpoint in endpoints:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(split(endpoint))
        socks.append(sock)
    out("listening")
    while True:
        ready, _, _ = select.select(socks, [], [])
        for sock in ready:
            _, addr = sock.recvfrom(2048)
            sock.sendto(f"{addr[0]}:{addr[1]}".encode(), addr)


def udp_mapped(lport: int, reflectors: list[str]) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", lport))
    sock.settimeout(2.0)
    seen = []
    for reflector in reflectors:
        sock.sendto(b"?", split(reflector))
        try:
            seen.append(sock.recvfrom(100)[0].decode())
        except TimeoutError:
            seen.append("timeout")
    out(" ".join(seen))
    return 0


def tcp_rate(port: int, seconds: float) -> int:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(1)
    out("listening")
    conn, _ = server.accept()
    total = len(conn.recv(65536))
    start = time.monotonic()
    while (left := start + seconds - time.monotonic()) > 0:
        conn.settimeout(left)
        try:
            chunk = conn.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            break
        total += len(chunk)
    out(f"{total * 8 / 1000 / (time.monotonic() - start):.0f}")
    return 0


def tcp_flood(host: str, port: int) -> int:
    with socket.create_connection((host, port), timeout=10) as conn:
        block = b"x" * 65536
        try:
            while True:
                conn.sendall(block)
        except OSError:
            return 0


def main(argv: list[str]) -> int:
    mode, args = argv[0], argv[1:]
    modes: dict[str, Callable[[], int | None]] = {
        "tcp-server": lambda: tcp_server(args[0], int(args[1])),
        "tcp-client": lambda: tcp_client(args[0], int(args[1]), float(args[2])),
        "tcp-punch": lambda: tcp_punch(int(args[0]), args[1], float(args[2])),
        "udp-reflector": lambda: udp_reflector(args),
        "udp-mapped": lambda: udp_mapped(int(args[0]), args[1:]),
        "tcp-rate": lambda: tcp_rate(int(args[0]), float(args[1])),
        "tcp-flood": lambda: tcp_flood(args[0], int(args[1])),
    }
    if mode not in modes:
        out(f"unknown mode {mode!r}")
        return 2
    return modes[mode]() or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
