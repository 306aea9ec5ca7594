"""Port mapping against a real router daemon: miniupnpd (NAT-PMP and UPnP-IGD) in the lab's r1.

The home h1 maps its port with PortMapper as a volunteer would (default gateway, SSDP multicast,
both only inside the lab), and the public host must then reach h1 through r1's WAN address, which
the lab's NAT blocks without the mapping; after the mapper closes, it must be blocked again.

miniupnpd refuses to work when its WAN address is "reserved", and the lab's WAN addresses are
TEST-NET-2 (RFC 5737), so ``ext_ip`` declares a stand-in public address. The forwarding rules it
installs match the WAN interface and port, not the address, so dials to the real WAN address are
forwarded; the stand-in is only what the router reports as its external address.
"""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.lab.conftest import MakeLab
from tests.lab.natlab import NatLab

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(shutil.which("miniupnpd") is None, reason="apt-get install -y miniupnpd"),
]

HERE = Path(__file__).parent
NETPROBE = str(HERE / "netprobe.py")
MAPPER = str(HERE / "portmap_probe.py")
PORT = 4100
STAND_IN_IP = "11.0.0.1"  # any non-reserved address; never routed anywhere in the lab

# The chains miniupnpd 2.3 (nftables backend) fills: one table "filter" of family inet with the
# forward, prerouting and postrouting chains jumping to its own (its defaults; Debian's
# nft_init.sh makes the same). The lab's own forward chain already accepts DNATed connections.
MINIUPNPD_TABLES = """table inet filter {
  chain forward { type filter hook forward priority 0; policy accept; jump miniupnpd; }
  chain miniupnpd { }
  chain prerouting { type nat hook prerouting priority -100; policy accept; jump prerouting_miniupnpd; }
  chain postrouting { type nat hook postrouting priority 100; policy accept; jump postrouting_miniupnpd; }
  chain prerouting_miniupnpd { }
  chain postrouting_miniupnpd { }
}
"""


def start_miniupnpd(lab: NatLab, tmp: Path) -> Path:
    rules = tmp / "miniupnpd.nft"
    rules.write_text(MINIUPNPD_TABLES)
    done = lab.run("r1", ["nft", "-f", str(rules)])
    assert done.returncode == 0, done.stderr
    conf = tmp / "miniupnpd.conf"
    conf.write_text(
        "ext_ifname=wan\n"
        "listening_ip=lan\n"
        f"ext_ip={STAND_IN_IP}\n"
        "enable_natpmp=yes\n"
        "enable_upnp=yes\n"
        "secure_mode=yes\n"
        f"lease_file={tmp / 'leases'}\n"
        "uuid=3d3cec3a-8cf0-11e0-98ee-001a6bd2d07b\n"
        f"allow 1024-65535 {lab.lan_ip('h1')}/24 1024-65535\n"
        "deny 0-65535 0.0.0.0/0 0-65535\n"
    )
    log = tmp / "miniupnpd.log"
    with log.open("wb") as out:
        lab.spawn(
            "r1",
            ["miniupnpd", "-d", "-f", str(conf), "-P", str(tmp / "miniupnpd.pid")],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 15
    while "Listening for NAT-PMP" not in log.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"miniupnpd did not start:\n{log.read_text()}"
        time.sleep(0.05)
    return log


def dial(lab: NatLab) -> str:
    """From the public host to r1's WAN address: "OK <address h1 saw>" or "FAIL ..."."""
    argv = [sys.executable, NETPROBE, "tcp-client", lab.wan("r1"), str(PORT), "2"]
    done = lab.run("pub", argv, timeout=20)
    return done.stdout.strip() or done.stderr.strip()


def read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline().decode().strip() if ready else ""


@pytest.mark.parametrize("method", ["natpmp", "upnp"])
def test_miniupnpd_mapping_makes_the_home_reachable_until_closed(
    make_lab: MakeLab, tmp_path: Path, method: str
) -> None:
    lab = make_lab("cone", "cone")
    log = start_miniupnpd(lab, tmp_path)
    server = lab.spawn(
        "h1", [sys.executable, NETPROBE, "tcp-server", "0.0.0.0", str(PORT)], stdout=subprocess.PIPE
    )
    assert read_line(server, 10) == "listening"
    assert dial(lab).startswith("FAIL"), "the NAT let an unsolicited connection in"

    mapper = lab.spawn("h1", [sys.executable, MAPPER, method, str(PORT)], stdout=subprocess.PIPE)
    line = read_line(mapper, 20)
    assert line, f"the mapper said nothing; miniupnpd:\n{log.read_text()}"
    mapping = json.loads(line)["mapping"]
    assert mapping is not None, f"{line}\nminiupnpd:\n{log.read_text()}"
    assert mapping["method"] == method
    assert (mapping["external_port"], mapping["internal_port"]) == (PORT, PORT)
    assert mapping["external_ip"] == STAND_IN_IP
    assert mapping["lifetime_s"] > 0

    seen = dial(lab)
    assert seen.startswith(f"OK {lab.PUB_IP}:"), f"{seen}\nminiupnpd:\n{log.read_text()}"

    mapper.terminate()  # the probe closes its mapper on SIGTERM, which deletes the mapping
    assert read_line(mapper, 15) == "closed"
    assert mapper.wait(10) == 0
    rules = lab.run("r1", ["nft", "list", "chain", "inet", "filter", "prerouting_miniupnpd"])
    assert "dnat" not in rules.stdout, rules.stdout
    assert dial(lab).startswith("FAIL"), "the mapping outlived the mapper"
