"""The NAT lab checks itself: each NAT kind behaves as natlab.sh promises, and nothing survives
teardown."""

from __future__ import annotations

import os
import secrets
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab.conftest import MakeLab
from tests.lab.natlab import NatLab, lab_namespaces, list_namespaces, sweep_stale

pytestmark = pytest.mark.lab

PROBE = str(Path(__file__).with_name("netprobe.py"))


@pytest.fixture(autouse=True)
def no_lab_left() -> Iterator[None]:
    yield
    # after make_lab's teardown (autouse fixtures are set up first, so torn down last)
    left = lab_namespaces(pid=os.getpid())
    assert not left, f"lab namespaces remain after the test: {left}"


def probe(lab: NatLab, where: str, *args: str, timeout: float = 20.0) -> str:
    """Run a netprobe mode to completion inside ``where``; its one line of output."""
    done = lab.run(where, [sys.executable, PROBE, *args], timeout=timeout)
    return done.stdout.strip() or done.stderr.strip()


def serve(lab: NatLab, where: str, *args: str) -> subprocess.Popen[bytes]:
    """Start a netprobe server inside ``where`` and wait until it listens."""
    proc = lab.spawn(where, [sys.executable, PROBE, *args], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 10.0)
    line = proc.stdout.readline() if ready else b""
    assert line == b"listening\n", f"{args[0]} in {where} did not start: {line!r}"
    return proc


def test_homes_reach_the_public_host_from_their_router_wan(make_lab: MakeLab) -> None:
    lab = make_lab()
    serve(lab, "pub", "tcp-server", "0.0.0.0", "7000")
    for home, router in (("h1", "r1"), ("h2", "r2")):
        seen = probe(lab, home, "tcp-client", lab.PUB_IP, "7000", "3")
        assert seen.startswith(f"OK {lab.wan(router)}:"), (home, seen)
    # the second public address answers too (reflectors need two)
    assert probe(lab, "h1", "tcp-client", lab.PUB_IP2, "7000", "3").startswith("OK ")


def test_unsolicited_inbound_connections_do_not_reach_a_home(make_lab: MakeLab) -> None:
    lab = make_lab()
    serve(lab, "h1", "tcp-server", "0.0.0.0", "7001")
    # the listener works: its router reaches it on the LAN
    assert probe(lab, "r1", "tcp-client", lab.lan_ip("h1"), "7001", "3").startswith("OK ")
    blocked = probe(lab, "pub", "tcp-client", lab.wan("r1"), "7001", "1.5")
    assert blocked.startswith("FAIL"), blocked
    private = probe(lab, "pub", "tcp-client", lab.lan_ip("h1"), "7001", "1.5")
    assert private.startswith("FAIL"), private
    assert probe(lab, "h2", "tcp-client", lab.lan_ip("h1"), "7001", "1.5").startswith("FAIL")


@pytest.mark.parametrize(
    ("nat1", "nat2", "punches"),
    [("cone", "cone", True), ("cone", "symmetric", False)],
)
def test_tcp_simultaneous_open(make_lab: MakeLab, nat1: str, nat2: str, punches: bool) -> None:
    lab = make_lab(nat1, nat2)
    duration = "4"
    sides = [
        lab.spawn(
            home,
            [sys.executable, PROBE, "tcp-punch", "6000", f"{lab.wan(other)}:6000", duration],
            stdout=subprocess.PIPE,
        )
        for home, other in (("h1", "r2"), ("h2", "r1"))
    ]
    results = [side.communicate(timeout=20)[0].decode().strip() for side in sides]
    # one side's OK means both sockets connected: it read the other's "hello"
    connected = any(r.startswith("OK") for r in results)
    assert connected == punches, f"{nat1}/{nat2}: {results}"
    if punches:
        # port preserved: each side sees the other's WAN address and the port it bound
        h1 = results[0] if results[0].startswith("OK") else None
        assert h1 is None or h1.endswith(f"-> {lab.wan('r2')}:6000"), h1


@pytest.mark.parametrize("nat_lab", [("cone", "symmetric")], indirect=True)
def test_udp_mapping_is_endpoint_independent_only_behind_a_cone(nat_lab: NatLab) -> None:
    lab = nat_lab
    reflectors = [f"{lab.PUB_IP}:3478", f"{lab.PUB_IP2}:3478", f"{lab.PUB_IP}:3479"]
    serve(lab, "pub", "udp-reflector", *reflectors)
    cone = probe(lab, "h1", "udp-mapped", "5000", *reflectors).split()
    assert cone == [f"{lab.wan('r1')}:5000"] * 3
    symmetric = probe(lab, "h2", "udp-mapped", "5000", *reflectors).split()
    assert "timeout" not in symmetric, symmetric
    assert all(m.startswith(f"{lab.wan('r2')}:") for m in symmetric), symmetric
    assert len(set(symmetric)) == 3, symmetric


def test_fullcone_forwards_port_4001_to_the_home(make_lab: MakeLab) -> None:
    lab = make_lab("fullcone", "cone")
    serve(lab, "h1", "tcp-server", "0.0.0.0", "4001")
    serve(lab, "h2", "tcp-server", "0.0.0.0", "4001")
    # forwarded without source NAT: h1 sees the public host itself
    forwarded = probe(lab, "pub", "tcp-client", lab.wan("r1"), "4001", "3")
    assert forwarded.startswith(f"OK {lab.PUB_IP}:"), forwarded
    assert probe(lab, "pub", "tcp-client", lab.wan("r2"), "4001", "1.5").startswith("FAIL")
    serve(lab, "h1", "udp-reflector", "0.0.0.0:4001")
    assert probe(lab, "pub", "udp-mapped", "5001", f"{lab.wan('r1')}:4001") == f"{lab.PUB_IP}:5001"


def test_same_lan_gives_both_homes_the_same_address(make_lab: MakeLab) -> None:
    lab = make_lab(same_lan=True)
    assert lab.lan_ip("h1") == lab.lan_ip("h2") == "10.201.1.2"
    for home in ("h1", "h2"):
        addrs = lab.run(home, ["ip", "-4", "-br", "addr", "show", "dev", "eth0"]).stdout
        assert "10.201.1.2/24" in addrs, (home, addrs)
    serve(lab, "pub", "tcp-server", "0.0.0.0", "7000")
    for home, router in (("h1", "r1"), ("h2", "r2")):
        seen = probe(lab, home, "tcp-client", lab.PUB_IP, "7000", "3")
        assert seen.startswith(f"OK {lab.wan(router)}:"), (home, seen)


def test_shape_limits_the_rate_and_unshape_lifts_it(make_lab: MakeLab) -> None:
    lab = make_lab()
    lab.shape("r1", "wan", 800)
    meter = serve(lab, "pub", "tcp-rate", "7100", "2")
    lab.spawn("h1", [sys.executable, PROBE, "tcp-flood", lab.PUB_IP, "7100"])
    kbit = int(meter.communicate(timeout=20)[0])
    assert 400 <= kbit <= 1000, kbit
    lab.unshape("r1", "wan")
    qdisc = lab.run("r1", ["tc", "qdisc", "show", "dev", "wan"]).stdout
    assert "tbf" not in qdisc, qdisc


def _alive(pid: int) -> bool:
    """Running (a zombie is as good as dead: it only waits for its parent to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_teardown_kills_everything_and_deletes_the_namespaces(make_lab: MakeLab) -> None:
    lab = make_lab()
    tracked = lab.spawn("h1", ["sh", "-c", "sleep 60 & wait"])
    # not through lab.spawn, and in its own session: only `ip netns pids` can find it
    stray = subprocess.Popen(
        ["ip", "netns", "exec", lab.ns("pub"), "sleep", "60"], start_new_session=True
    )
    deadline = time.monotonic() + 5
    pids_h1: list[int] = []
    while len(pids_h1) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
        listed = subprocess.check_output(["ip", "netns", "pids", lab.ns("h1")])
        pids_h1 = [int(p) for p in listed.split()]
    assert len(pids_h1) == 2, pids_h1  # sh and its background sleep
    lab.teardown()
    assert tracked.returncode is not None
    assert stray.wait(timeout=5) is not None
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in pids_h1) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids_h1)
    assert not [n for n in list_namespaces() if n.startswith(lab.prefix)]
    lab.teardown()  # idempotent


def test_a_failed_setup_leaves_nothing(
    lab_support: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if lab_support is not None:
        pytest.skip(lab_support)
    lab = NatLab()

    def broken(router: str, home: str) -> None:
        raise RuntimeError("half way")

    monkeypatch.setattr(lab, "_build_site", broken)
    with pytest.raises(RuntimeError, match="half way"):
        lab.setup()
    assert not [n for n in list_namespaces() if n.startswith(lab.prefix)]


def test_sweep_stale_deletes_only_labs_whose_creator_is_dead(lab_support: str | None) -> None:
    if lab_support is not None:
        pytest.skip(lab_support)
    gone = subprocess.Popen(["true"])
    gone.wait()
    tag = secrets.token_hex(3)
    stale, live = f"blab{tag}-{gone.pid}-h1", f"blab{tag}-{os.getpid()}-h1"
    try:
        for name in (stale, live):
            subprocess.run(["ip", "netns", "add", name], check=True)
        swept = sweep_stale()
        names = list_namespaces()
        # gone, whoever swept it (a concurrent session's sweep may have been first)
        assert stale not in names, swept
        assert live not in swept
        assert live in names
    finally:
        for name in (stale, live):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
