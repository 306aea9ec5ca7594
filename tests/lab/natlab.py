"""A NAT lab in Linux network namespaces: two homes behind two routers, and a public host.

Topology (every address exists only inside the lab's namespaces; nothing is attached to the root
namespace, so no packet leaves the machine)::

    h1 10.201.1.2 --- 10.201.1.1 [r1 NAT] 198.51.100.11 --+
                                                          |  bridge "inet" in namespace inet
    h2 10.201.2.2 --- 10.201.2.1 [r2 NAT] 198.51.100.12 --+  ("the internet")
                                                          |
    pub 198.51.100.10 and 198.51.100.20 ------------------+
                                                          |
    (h3 10.201.3.2 --- 10.201.3.1 [r3 NAT] 198.51.100.13 -+  only with ``nat3``: benchmarks)

198.51.100.0/24 is TEST-NET-2 (RFC 5737), never routed on the real internet. With ``same_lan``
both homes use 10.201.1.0/24, as two home routers typically do, so h2 is also 10.201.1.2.

NAT kinds (nftables in each router, the same rules as ``natlab.sh``):

- ``cone``: masquerade with source-port preservation: endpoint-independent mapping, address+port
  dependent filtering ("port-restricted cone"). UDP and TCP hole punching work.
- ``symmetric``: masquerade ``fully-random``: endpoint-dependent mapping; hole punching against
  another restricted NAT fails, a relay is needed.
- ``fullcone``: ``cone`` plus a static forward of TCP and UDP port 4001 to the home host (what a
  UPnP or NAT-PMP mapping gives).

Namespaces are named ``blab<6 hex>-<creator pid>-<role>``: unique per lab, so concurrent runs (or a
developer's ``natlab.sh``) never collide, and ``sweep_stale`` can tell a crashed run's leftovers
(creator dead) from a live lab.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import IO, Any, Literal

NatKind = Literal["cone", "symmetric", "fullcone"]
Role = Literal["inet", "pub", "r1", "r2", "h1", "h2", "r3", "h3"]

ROLES: tuple[Role, ...] = ("inet", "pub", "r1", "r2", "h1", "h2")
THIRD_HOME: tuple[Role, ...] = ("r3", "h3")
"""A third home (10.201.3.0/24 behind r3 at 198.51.100.13) for labs made with ``nat3``."""
NAT_KINDS: tuple[NatKind, ...] = ("cone", "symmetric", "fullcone")
FORWARDED_PORT = 4001
# role "probe" is lab_unavailable's throwaway namespace; swept like the others if it was left
NAME_RE = re.compile(
    r"^blab(?P<tag>[0-9a-f]{6})-(?P<pid>\d+)-(?P<role>inet|pub|r1|r2|h1|h2|r3|h3|probe)$"
)

# How long a spawned process gets between SIGTERM and SIGKILL at teardown.
KILL_GRACE = 3.0


def _ip(*args: str, input_text: str | None = None, check: bool = True) -> str:
    done = subprocess.run(
        ["ip", *args], input=input_text, capture_output=True, text=True, timeout=30, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _nsexec(ns: str, argv: Sequence[str], input_text: str | None = None) -> None:
    """Run a setup command inside a namespace; raise with its stderr when it fails."""
    done = subprocess.run(
        ["ip", "netns", "exec", ns, *argv],
        input=input_text,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"in {ns}: {' '.join(argv)} failed: {done.stderr.strip()}")


def _sysctl(ns: str, key: str, value: str) -> None:
    # /proc/sys/net shows the network namespace of the process that opens it, so a shell started
    # by `ip netns exec` writes the lab's value (no dependency on procps' sysctl binary)
    path = "/proc/sys/" + key.replace(".", "/")
    _nsexec(ns, ["sh", "-c", 'printf %s "$1" > "$2"', "sh", value, path])


def list_namespaces() -> list[str]:
    """Every network namespace name on the machine (``ip netns list``)."""
    try:
        out = _ip("netns", "list", check=False)
    except FileNotFoundError:
        return []  # no iproute2: no namespaces of ours either
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def lab_namespaces(pid: int | None = None) -> list[str]:
    """The lab namespaces present, optionally only those created by process ``pid``."""
    found = []
    for name in list_namespaces():
        match = NAME_RE.match(name)
        if match and (pid is None or int(match["pid"]) == pid):
            found.append(name)
    return found


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _kill_namespace_pids(ns: str) -> None:
    """SIGTERM, then SIGKILL, whatever still runs inside ``ns``: a namespace whose processes
    survive ``ip netns del`` lives on, unnamed, with its addresses and sockets."""
    deadline = time.monotonic() + KILL_GRACE
    sig = signal.SIGTERM
    while True:
        pids = [int(p) for p in _ip("netns", "pids", ns, check=False).split()]
        pids = [p for p in pids if p != os.getpid()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if sig == signal.SIGKILL and time.monotonic() > deadline + KILL_GRACE:
            raise RuntimeError(f"processes {pids} in {ns} survive SIGKILL")
        if time.monotonic() > deadline:
            sig = signal.SIGKILL
        time.sleep(0.05)


def _wait_exited(pid: int, deadline: float) -> None:
    """Until ``deadline``, wait for child ``pid`` to exit, leaving it unreaped (a zombie)."""
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return
        except ChildProcessError:
            return  # already reaped by its owner
        time.sleep(0.02)


def _delete_namespace(ns: str) -> None:
    _kill_namespace_pids(ns)
    _ip("netns", "del", ns, check=False)


def sweep_stale() -> list[str]:
    """Delete lab namespaces left by crashed runs; return their names.

    Only namespaces whose creator process (the pid in the name) is dead are touched, so a live lab
    of a concurrent run stays. A reused pid errs on the safe side: the leftover stays until the
    new owner of that pid exits."""
    swept = []
    for name in lab_namespaces():
        match = NAME_RE.match(name)
        assert match is not None
        if not _pid_alive(int(match["pid"])):
            _delete_namespace(name)
            swept.append(name)
    return swept


_PROBE_RULES = """table ip blab_probe {
  chain post { type nat hook postrouting priority srcnat; policy accept;
    oifname "lo" masquerade fully-random
  }
}
"""


def lab_unavailable() -> str | None:
    """Why a lab cannot be built here, or None when it can.

    Tries the real thing on a throwaway namespace: creating one, and loading a NAT table into it
    (a kernel without nf_tables NAT fails only there)."""
    if not sys.platform.startswith("linux"):
        return f"the NAT lab needs Linux network namespaces (this is {sys.platform})"
    if os.geteuid() != 0:
        return "the NAT lab needs root (network namespaces, nftables)"
    tools = {"ip": "iproute2", "nft": "nftables", "tc": "iproute2"}
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        packages = " ".join(sorted({tools[tool] for tool in missing}))
        return f"{', '.join(missing)} missing (apt-get install -y {packages})"
    return _probe_namespace()


def _probe_namespace() -> str | None:
    """Create a throwaway namespace and load a NAT table into it; the error, if any."""
    probe = f"blab{secrets.token_hex(3)}-{os.getpid()}-probe"
    try:
        add = subprocess.run(
            ["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30, check=False
        )
        if add.returncode != 0:
            return f"`ip netns add` fails: {add.stderr.strip()}"
        nft = subprocess.run(
            ["ip", "netns", "exec", probe, "nft", "-f", "-"],
            input=_PROBE_RULES,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if nft.returncode != 0:
            return f"nftables NAT does not load in a namespace: {nft.stderr.strip()}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"probing network namespaces failed: {exc}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def _nat_rules(kind: NatKind, host: str) -> str:
    """The router's nftables ruleset (the same as natlab.sh)."""
    flags = " fully-random" if kind == "symmetric" else ""
    forward = ""
    if kind == "fullcone":
        forward = (
            f'    iifname "wan" udp dport {FORWARDED_PORT} dnat to {host}:{FORWARDED_PORT}\n'
            f'    iifname "wan" tcp dport {FORWARDED_PORT} dnat to {host}:{FORWARDED_PORT}\n'
        )
    # filter_in drops unsolicited packets addressed to the router itself, as home routers do.
    # Besides realism this matters for hole punching: a packet accepted on INPUT gets a confirmed
    # conntrack entry, and a later outbound packet of the same 4-tuple is then SNATed to a new
    # port (the NAT looks symmetric). A dropped packet leaves no confirmed entry.
    return (
        "table ip natlab {\n"
        "  chain nat_post { type nat hook postrouting priority srcnat; policy accept;\n"
        f'    oifname "wan" masquerade{flags}\n'
        "  }\n"
        "  chain nat_pre { type nat hook prerouting priority dstnat; policy accept;\n"
        f"{forward}"
        "  }\n"
        "  chain filter_in { type filter hook input priority filter; policy accept;\n"
        '    iifname "wan" ct state established,related accept\n'
        '    iifname "wan" drop\n'
        "  }\n"
        "  chain filter_fwd { type filter hook forward priority filter; policy drop;\n"
        "    ct state established,related accept\n"
        "    ct status dnat accept\n"
        '    iifname "lan" oifname "wan" accept\n'
        "  }\n"
        "}\n"
    )


class NatLab:
    """One lab instance: its namespaces, NAT rules, and the processes spawned in it.

    ``setup`` builds it (tearing down what it made if a step fails), ``teardown`` kills every
    process and deletes every namespace, idempotently; ``with NatLab(...) as lab`` does both."""

    PUB_IP = "198.51.100.10"
    PUB_IP2 = "198.51.100.20"
    WAN_IPS: Mapping[str, str] = {
        "r1": "198.51.100.11", "r2": "198.51.100.12", "r3": "198.51.100.13"
    }  # fmt: skip

    def __init__(
        self,
        nat1: NatKind = "cone",
        nat2: NatKind = "cone",
        same_lan: bool = False,
        *,
        udp_timeout: int | None = None,
        nat3: NatKind | None = None,
    ) -> None:
        for kind in (nat1, nat2, nat3 or "cone"):
            if kind not in NAT_KINDS:
                raise ValueError(f"unknown NAT kind {kind!r} (one of {', '.join(NAT_KINDS)})")
        self.nat1: NatKind = nat1
        self.nat2: NatKind = nat2
        self.nat3: NatKind | None = nat3
        self.roles: tuple[Role, ...] = ROLES + (THIRD_HOME if nat3 else ())
        self.same_lan = same_lan
        # conntrack UDP timeout (s) in the routers, to test keepalives; None keeps the kernel's
        self.udp_timeout = udp_timeout
        self.prefix = f"blab{secrets.token_hex(3)}-{os.getpid()}-"
        self._lans = {
            "h1": "10.201.1", "h2": "10.201.1" if same_lan else "10.201.2", "h3": "10.201.3"
        }  # fmt: skip
        self._procs: list[subprocess.Popen[Any]] = []
        self._created: list[str] = []

    # ----------------------------------------------------------------- names and addresses

    def ns(self, where: str) -> str:
        """The real namespace name of role ``where`` (inet, pub, r1, r2, h1, h2)."""
        if where not in self.roles:
            raise ValueError(f"no lab namespace {where!r} (one of {', '.join(self.roles)})")
        return self.prefix + where

    def wan(self, router: str) -> str:
        """A router's public (WAN) address."""
        return self.WAN_IPS[router]

    def lan_ip(self, where: str) -> str:
        """A LAN address: h1/h2 (the home host, .2) or r1/r2 (the router's LAN side, .1)."""
        home = {"r1": "h1", "r2": "h2", "r3": "h3"}.get(where, where)
        return f"{self._lans[home]}.{2 if where.startswith('h') else 1}"

    def nat(self, router: str) -> NatKind:
        kind = {"r1": self.nat1, "r2": self.nat2, "r3": self.nat3}[router]
        if kind is None:
            raise ValueError(f"this lab has no {router}")
        return kind

    # ------------------------------------------------------------------------ lifecycle

    def setup(self) -> NatLab:
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def _build(self) -> None:
        for role in self.roles:
            name = self.ns(role)
            self._created.append(name)  # before `add`: teardown must try even a half-made one
            _ip("netns", "add", name)
            _ip("-n", name, "link", "set", "lo", "up")
            # no IPv6 in the lab: keeps it to the IPv4 NAT behaviour under test; `default` too,
            # as the interfaces are made after this
            _sysctl(name, "net.ipv6.conf.all.disable_ipv6", "1")
            _sysctl(name, "net.ipv6.conf.default.disable_ipv6", "1")
        inet, pub = self.ns("inet"), self.ns("pub")
        _ip("-n", inet, "link", "add", "inet", "type", "bridge")
        _ip("-n", inet, "link", "set", "inet", "up")
        _ip("-n", pub, "link", "add", "eth0", "type", "veth", "peer", "name", "pub", "netns", inet)
        _ip("-n", inet, "link", "set", "pub", "master", "inet", "up")
        _ip("-n", pub, "addr", "add", f"{self.PUB_IP}/24", "dev", "eth0")
        _ip("-n", pub, "addr", "add", f"{self.PUB_IP2}/24", "dev", "eth0")
        _ip("-n", pub, "link", "set", "eth0", "up")
        self._build_site("r1", "h1")
        self._build_site("r2", "h2")
        if self.nat3 is not None:
            self._build_site("r3", "h3")

    def _build_site(self, router: Role, home: Role) -> None:
        r, h, inet = self.ns(router), self.ns(home), self.ns("inet")
        # WAN: a veth straight from the router into the bridge's namespace
        _ip("-n", r, "link", "add", "wan", "type", "veth", "peer", "name", router, "netns", inet)
        _ip("-n", inet, "link", "set", router, "master", "inet", "up")
        _ip("-n", r, "addr", "add", f"{self.wan(router)}/24", "dev", "wan")
        _ip("-n", r, "link", "set", "wan", "up")
        # LAN: a veth between router and home
        _ip("-n", r, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", h)
        _ip("-n", r, "addr", "add", f"{self.lan_ip(router)}/24", "dev", "lan")
        _ip("-n", r, "link", "set", "lan", "up")
        _ip("-n", h, "addr", "add", f"{self.lan_ip(home)}/24", "dev", "eth0")
        _ip("-n", h, "link", "set", "eth0", "up")
        _ip("-n", h, "route", "add", "default", "via", self.lan_ip(router))
        _sysctl(r, "net.ipv4.ip_forward", "1")
        _nsexec(r, ["nft", "-f", "-"], _nat_rules(self.nat(router), self.lan_ip(home)))
        if self.udp_timeout is not None:
            # conntrack's sysctls exist in the namespace once the NAT rules loaded conntrack
            for key in ("nf_conntrack_udp_timeout", "nf_conntrack_udp_timeout_stream"):
                _sysctl(r, f"net.netfilter.{key}", str(self.udp_timeout))

    def teardown(self) -> None:
        """Kill the spawned processes (their whole process groups), then anything else left in
        the lab's namespaces, then delete the namespaces. Safe to call twice."""
        procs, self._procs = self._procs, []
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE
        for proc in procs:
            # wait without reaping: an unreaped leader keeps its pid, so the SIGKILL below cannot
            # reach a stranger's process group that reused the number
            _wait_exited(proc.pid, deadline)
            # the group too, and even when the leader is gone: a child may outlive its leader
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        created, self._created = self._created, []
        present = set(list_namespaces())
        # homes first: what runs there is what tests spawn; the bridge last
        for name in reversed(created):
            if name in present:
                _delete_namespace(name)

    def __enter__(self) -> NatLab:
        return self.setup()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.teardown()

    # ---------------------------------------------------------------- running things inside

    def spawn(
        self,
        where: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside namespace ``where``; teardown kills it (and its children: it
        leads its own session, so its process group is theirs too)."""
        # `ip netns exec` execs argv in place (no fork), so proc.pid is argv's own pid
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(where), *argv],
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            start_new_session=True,
        )
        self._procs.append(proc)
        return proc

    def run(
        self,
        where: str,
        argv: Sequence[str],
        *,
        timeout: float = 30.0,
        check: bool = False,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside ``where`` to completion, output captured as text."""
        return subprocess.run(
            ["ip", "netns", "exec", self.ns(where), *argv],
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    # ------------------------------------------------------------------------ impairment

    def shape(self, where: str, dev: str, rate_kbit: int) -> None:
        """Limit egress of ``dev`` in ``where`` to ``rate_kbit`` (tbf; netem may be missing from
        the kernel, and a rate is all tbf needs). Replaces any earlier shaping."""
        # a burst of 10 ms at the rate, and never under one full-size frame plus headroom
        burst = max(4096, rate_kbit * 1000 // 8 // 100)
        done = self.run(
            where,
            [
                "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
                "rate", f"{rate_kbit}kbit", "burst", str(burst), "latency", "400ms",
            ],
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"shaping {dev} in {where} failed: {done.stderr.strip()}")

    def unshape(self, where: str, dev: str) -> None:
        """Remove the shaping of ``dev`` (no error when there was none)."""
        self.run(where, ["tc", "qdisc", "del", "dev", dev, "root"])
