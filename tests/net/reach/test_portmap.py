"""PortMapper against fake routers on loopback: NAT-PMP (UDP) and UPnP-IGD (SSDP + HTTP + SOAP).

Every test names the discovery addresses explicitly, so nothing is sent to the real default gateway
or to the LAN's multicast group.
"""

from __future__ import annotations

import logging
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.net.reach.portmap import Mapping, PortMapper
from core.net.reach.portmap.gateway import default_gateway_ipv4
from tests.support.fake_igd import FakeIgd
from tests.support.fake_natpmp import FakeNatPmp
from tests.support.leaks import assert_no_leaks, open_fd_count, wait_until

TIMEOUT = 0.5


def _closed_udp_port() -> int:
    """A loopback UDP port nobody listens on (bound, read, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
async def checked() -> AsyncIterator[None]:
    baseline = open_fd_count()
    yield
    await assert_no_leaks(baseline)


@pytest.fixture
async def natpmp(checked: None) -> AsyncIterator[tuple[FakeNatPmp, int]]:
    router = FakeNatPmp()
    port = await router.start()
    yield router, port
    router.close()


@pytest.fixture
async def igd(checked: None) -> AsyncIterator[tuple[FakeIgd, int]]:
    router = FakeIgd()
    port = await router.start()
    yield router, port
    await router.close()


def natpmp_mapper(port: int, **kwargs: object) -> PortMapper:
    return PortMapper(
        4100,
        methods=("natpmp",),
        natpmp_gateway="127.0.0.1",
        natpmp_port=port,
        timeout=TIMEOUT,
        **kwargs,  # type: ignore[arg-type]
    )


def upnp_mapper(port: int, **kwargs: object) -> PortMapper:
    return PortMapper(
        4100,
        methods=("upnp",),
        ssdp_target=("127.0.0.1", port),
        ssdp_source=("127.0.0.1", 0),
        timeout=TIMEOUT,
        **kwargs,  # type: ignore[arg-type]
    )


# --- NAT-PMP ---------------------------------------------------------------------------------


async def test_natpmp_maps_the_same_port_and_deletes_it_on_close(
    natpmp: tuple[FakeNatPmp, int],
) -> None:
    router, port = natpmp
    changes: list[Mapping | None] = []
    mapper = natpmp_mapper(port, on_change=changes.append)
    mapping = await mapper.start()
    assert mapping is not None
    assert (mapping.method, mapping.protocol) == ("natpmp", "TCP")
    assert (mapping.external_ip, mapping.external_port, mapping.internal_port) == (
        "203.0.113.7",
        4100,
        4100,
    )
    assert mapping.lifetime_s == 3600
    assert mapping.expires_at is not None
    assert mapping.expires_at == pytest.approx(time.time() + 3600, abs=5)
    assert router.mappings == {4100: 4100}
    assert mapper.mapping == mapping
    await mapper.close()
    assert router.requests[-1] == (2, 4100, 0, 0)  # RFC 6886 deletion: lifetime 0, port 0
    assert router.mappings == {}
    assert changes == [mapping, None]


async def test_natpmp_renews_before_the_granted_lifetime_ends(
    natpmp: tuple[FakeNatPmp, int],
) -> None:
    router, port = natpmp
    router.granted_lifetime = 2  # the router grants less than asked: renew by its number
    mapper = natpmp_mapper(port, lease_s=3600)
    first = await mapper.start()
    assert first is not None
    assert first.lifetime_s == 2
    await wait_until(lambda: len(router.requests) >= 3)
    # renewals ask for the external port we hold, and each moves the expiry forward
    assert [request[2] for request in router.requests[:3]] == [4100, 4100, 4100]
    assert mapper.mapping is not None
    assert mapper.mapping.expires_at is not None
    assert first.expires_at is not None
    assert mapper.mapping.expires_at > first.expires_at
    await mapper.close()


async def test_natpmp_reports_a_changed_external_port(natpmp: tuple[FakeNatPmp, int]) -> None:
    router, port = natpmp
    changes: list[Mapping | None] = []
    mapper = natpmp_mapper(port, lease_s=2, on_change=changes.append)
    assert await mapper.start() is not None
    router.port_offset = 7  # after a reboot, the router hands out another port
    await wait_until(lambda: len(changes) == 2)
    assert changes[1] is not None
    assert changes[1].external_port == 4107
    await mapper.close()


async def test_natpmp_mapping_lost_when_renewals_fail_until_expiry(
    natpmp: tuple[FakeNatPmp, int],
) -> None:
    router, port = natpmp
    changes: list[Mapping | None] = []
    mapper = natpmp_mapper(port, lease_s=2, on_change=changes.append)
    assert await mapper.start() is not None
    router.result = 3  # network failure from now on
    await wait_until(lambda: changes[-1] is None)
    assert mapper.mapping is None
    assert "result 3" in mapper.last_reason
    await mapper.close()


async def test_natpmp_refusal_gives_none_with_the_reason(
    natpmp: tuple[FakeNatPmp, int], caplog: pytest.LogCaptureFixture
) -> None:
    router, port = natpmp
    router.result = 2
    mapper = natpmp_mapper(port)
    with caplog.at_level(logging.INFO, logger="core.net.reach.portmap"):
        assert await mapper.start() is None
    assert "refused: result 2" in mapper.last_reason
    assert "refused: result 2" in caplog.text
    await mapper.close()


async def test_natpmp_malformed_answer_gives_none(natpmp: tuple[FakeNatPmp, int]) -> None:
    router, port = natpmp
    router.malformed = True
    mapper = natpmp_mapper(port)
    assert await mapper.start() is None
    assert "NAT-PMP" in mapper.last_reason
    await mapper.close()


async def test_natpmp_silent_router_gives_none_within_the_timeout(
    natpmp: tuple[FakeNatPmp, int],
) -> None:
    router, port = natpmp
    router.silent = True
    mapper = natpmp_mapper(port)
    started = time.monotonic()
    assert await mapper.start() is None
    assert time.monotonic() - started < TIMEOUT + 1.0
    assert "no answer" in mapper.last_reason
    await mapper.close()


# --- UPnP-IGD --------------------------------------------------------------------------------


async def test_upnp_maps_and_deletes_on_close(igd: tuple[FakeIgd, int]) -> None:
    router, port = igd
    mapper = upnp_mapper(port, description="Barnraise test")
    mapping = await mapper.start()
    assert mapping is not None
    assert (mapping.method, mapping.external_ip, mapping.external_port) == (
        "upnp",
        "198.51.100.9",
        4100,
    )
    added = router.mappings[4100]
    assert added["NewInternalClient"] == "127.0.0.1"  # our address facing the router
    assert added["NewInternalPort"] == "4100"
    assert added["NewLeaseDuration"] == "3600"
    assert added["NewPortMappingDescription"] == "Barnraise test"
    await mapper.close()
    assert router.calls[-1][0] == "DeletePortMapping"
    assert router.mappings == {}


async def test_upnp_renews_with_a_short_lease(igd: tuple[FakeIgd, int]) -> None:
    router, port = igd
    mapper = upnp_mapper(port, lease_s=2)
    assert await mapper.start() is not None
    await wait_until(lambda: [c[0] for c in router.calls].count("AddPortMapping") >= 3)
    await mapper.close()


async def test_upnp_takes_another_port_when_ours_is_taken(igd: tuple[FakeIgd, int]) -> None:
    router, port = igd
    router.taken_ports = {4100}
    mapper = upnp_mapper(port)
    mapping = await mapper.start()
    assert mapping is not None
    assert mapping.external_port != 4100
    assert list(router.mappings) == [mapping.external_port]
    await mapper.close()


async def test_upnp_falls_back_to_a_permanent_lease(igd: tuple[FakeIgd, int]) -> None:
    router, port = igd
    router.only_permanent = True
    mapper = upnp_mapper(port)
    mapping = await mapper.start()
    assert mapping is not None
    assert (mapping.lifetime_s, mapping.expires_at) == (0, None)
    await mapper.close()
    assert router.mappings == {}


@pytest.mark.parametrize(
    ("fault", "value", "reason"),
    [
        ("refuse", {"AddPortMapping": 606}, "error 606"),
        ("bad_description", True, "unusable description"),
        ("bad_soap", True, "AddPortMapping failed"),
    ],
    ids=["refusal", "malformed-description", "malformed-soap-answer"],
)
async def test_upnp_failures_give_none_with_the_reason(
    igd: tuple[FakeIgd, int], fault: str, value: object, reason: str
) -> None:
    router, port = igd
    setattr(router, fault, value)
    mapper = upnp_mapper(port)
    assert await mapper.start() is None
    assert reason in mapper.last_reason
    await mapper.close()


# --- both, and neither -----------------------------------------------------------------------


async def test_no_router_gives_none_quickly(checked: None) -> None:
    mapper = PortMapper(
        4100,
        natpmp_gateway="127.0.0.1",
        natpmp_port=_closed_udp_port(),
        ssdp_target=("127.0.0.1", _closed_udp_port()),
        ssdp_source=("127.0.0.1", 0),
        timeout=TIMEOUT,
    )
    started = time.monotonic()
    assert await mapper.start() is None
    assert time.monotonic() - started < TIMEOUT + 1.0
    assert "NAT-PMP" in mapper.last_reason
    assert "UPnP" in mapper.last_reason
    await mapper.close()


async def test_natpmp_preferred_when_both_answer(
    natpmp: tuple[FakeNatPmp, int], igd: tuple[FakeIgd, int]
) -> None:
    (_, pmp_port), (upnp, ssdp_port) = natpmp, igd
    mapper = PortMapper(
        4100,
        natpmp_gateway="127.0.0.1",
        natpmp_port=pmp_port,
        ssdp_target=("127.0.0.1", ssdp_port),
        ssdp_source=("127.0.0.1", 0),
        timeout=TIMEOUT,
    )
    mapping = await mapper.start()
    assert mapping is not None
    assert mapping.method == "natpmp"
    assert upnp.mappings == {}  # the UPnP router was found but not asked
    await mapper.close()


async def test_upnp_used_when_natpmp_refuses(
    natpmp: tuple[FakeNatPmp, int], igd: tuple[FakeIgd, int]
) -> None:
    (pmp, pmp_port), (upnp, ssdp_port) = natpmp, igd
    pmp.result = 2
    mapper = PortMapper(
        4100,
        natpmp_gateway="127.0.0.1",
        natpmp_port=pmp_port,
        ssdp_target=("127.0.0.1", ssdp_port),
        ssdp_source=("127.0.0.1", 0),
        timeout=TIMEOUT,
    )
    mapping = await mapper.start()
    assert mapping is not None
    assert mapping.method == "upnp"
    await mapper.close()
    assert upnp.mappings == {}


async def test_a_failing_on_change_callback_does_not_stop_the_mapper(
    natpmp: tuple[FakeNatPmp, int],
) -> None:
    _, port = natpmp

    def explode(mapping: Mapping | None) -> None:
        raise RuntimeError("callback bug")

    mapper = natpmp_mapper(port, on_change=explode)
    assert await mapper.start() is not None
    await mapper.close()


async def test_start_twice_is_an_error(natpmp: tuple[FakeNatPmp, int]) -> None:
    _, port = natpmp
    mapper = natpmp_mapper(port)
    await mapper.start()
    with pytest.raises(RuntimeError):
        await mapper.start()
    await mapper.close()


# --- finding the gateway -------------------------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the Linux route table")
def test_default_gateway_from_the_linux_route_table(tmp_path: Path) -> None:
    table = tmp_path / "route"
    table.write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eth0\t0001A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
        "eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
    )
    expected = "192.168.1.1" if sys.byteorder == "little" else "1.1.168.192"
    assert default_gateway_ipv4(table) == expected
    table.write_text(table.read_text().splitlines()[0] + "\n")
    assert default_gateway_ipv4(table) is None
    assert default_gateway_ipv4(tmp_path / "missing") is None
