"""A UPnP Internet Gateway Device on loopback for tests: an SSDP responder (unicast, loopback only),
the device and service descriptions over HTTP, and SOAP control of one WANIPConnection service."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import cast

from aiohttp import web

SERVICE = "urn:schemas-upnp-org:service:WANIPConnection:1"
_ENVELOPE = (
    '<?xml version="1.0"?>\n<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/" '
    's:encodingStyle="http://schemas.xmlsoap.org/soap/encoding/"><s:Body>{}</s:Body></s:Envelope>'
)
_FAULT = (
    "<s:Fault><faultcode>s:Client</faultcode><faultstring>UPnPError</faultstring><detail>"
    '<UPnPError xmlns="urn:schemas-upnp-org:control-1-0"><errorCode>{code}</errorCode>'
    "<errorDescription>{text}</errorDescription></UPnPError></detail></s:Fault>"
)
_DEVICE = """<?xml version="1.0"?>
<root xmlns="urn:schemas-upnp-org:device-1-0">
<specVersion><major>1</major><minor>0</minor></specVersion>
<device>
 <deviceType>urn:schemas-upnp-org:device:InternetGatewayDevice:1</deviceType>
 <friendlyName>Fake router</friendlyName><manufacturer>tests</manufacturer><modelName>fake</modelName>
 <UDN>uuid:00000000-0000-0000-0000-000000000001</UDN>
 <deviceList><device>
  <deviceType>urn:schemas-upnp-org:device:WANDevice:1</deviceType>
  <friendlyName>WAN</friendlyName><manufacturer>tests</manufacturer><modelName>fake</modelName>
  <UDN>uuid:00000000-0000-0000-0000-000000000002</UDN>
  <deviceList><device>
   <deviceType>urn:schemas-upnp-org:device:WANConnectionDevice:1</deviceType>
   <friendlyName>WAN connection</friendlyName><manufacturer>tests</manufacturer><modelName>fake</modelName>
   <UDN>uuid:00000000-0000-0000-0000-000000000003</UDN>
   <serviceList><service>
    <serviceType>urn:schemas-upnp-org:service:WANIPConnection:1</serviceType>
    <serviceId>urn:upnp-org:serviceId:WANIPConn1</serviceId>
    <SCPDURL>/WANIPCn.xml</SCPDURL><controlURL>/ctl/IPConn</controlURL><eventSubURL>/evt/IPConn</eventSubURL>
   </service></serviceList>
  </device></deviceList>
 </device></deviceList>
</device>
</root>"""


def _action(name: str, args: list[tuple[str, str, str]]) -> str:
    arguments = "".join(
        f"<argument><name>{arg}</name><direction>{direction}</direction>"
        f"<relatedStateVariable>{var}</relatedStateVariable></argument>"
        for arg, direction, var in args
    )
    return f"<action><name>{name}</name><argumentList>{arguments}</argumentList></action>"


_MAPPING_KEY = [
    ("NewRemoteHost", "in", "RemoteHost"),
    ("NewExternalPort", "in", "ExternalPort"),
    ("NewProtocol", "in", "PortMappingProtocol"),
]
_SCPD = (
    '<?xml version="1.0"?>\n<scpd xmlns="urn:schemas-upnp-org:service-1-0">'
    "<specVersion><major>1</major><minor>0</minor></specVersion><actionList>"
    + _action(
        "AddPortMapping",
        [
            *_MAPPING_KEY,
            ("NewInternalPort", "in", "InternalPort"),
            ("NewInternalClient", "in", "InternalClient"),
            ("NewEnabled", "in", "PortMappingEnabled"),
            ("NewPortMappingDescription", "in", "PortMappingDescription"),
            ("NewLeaseDuration", "in", "PortMappingLeaseDuration"),
        ],
    )
    + _action("DeletePortMapping", _MAPPING_KEY)
    + _action("GetExternalIPAddress", [("NewExternalIPAddress", "out", "ExternalIPAddress")])
    + "</actionList><serviceStateTable>"
    + "".join(
        f'<stateVariable sendEvents="no"><name>{name}</name><dataType>{kind}</dataType></stateVariable>'
        for name, kind in [
            ("RemoteHost", "string"),
            ("ExternalPort", "ui2"),
            ("PortMappingProtocol", "string"),
            ("InternalPort", "ui2"),
            ("InternalClient", "string"),
            ("PortMappingEnabled", "boolean"),
            ("PortMappingDescription", "string"),
            ("PortMappingLeaseDuration", "ui4"),
            ("ExternalIPAddress", "string"),
        ]
    )
    + "</serviceStateTable></scpd>"
)


@dataclass
class FakeIgd(asyncio.DatagramProtocol):
    external_ip: str = "198.51.100.9"
    refuse: dict[str, int] = field(default_factory=dict)
    """Action name -> UPnP error code to answer with (a SOAP fault)."""
    taken_ports: set[int] = field(default_factory=set)
    """External ports someone else holds: AddPortMapping answers 718 for them."""
    only_permanent: bool = False
    """Answer 725 to leases other than 0, as many IGD:1 routers do."""
    bad_description: bool = False
    bad_soap: bool = False
    calls: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    mappings: dict[int, dict[str, str]] = field(default_factory=dict)
    transport: asyncio.DatagramTransport | None = None
    http_port: int = 0
    runner: web.AppRunner | None = None

    async def start(self) -> int:
        """Serve; return the SSDP port to search."""
        app = web.Application()
        app.router.add_get("/rootDesc.xml", self._description)
        app.router.add_get("/WANIPCn.xml", self._scpd)
        app.router.add_post("/ctl/IPConn", self._control)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.http_port = self.runner.addresses[0][1]
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: self, local_addr=("127.0.0.1", 0))
        assert self.transport is not None
        port: int = self.transport.get_extra_info("sockname")[1]
        return port

    async def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if self.runner is not None:
            await self.runner.cleanup()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        assert self.transport is not None
        text = data.decode("latin-1")
        if not text.startswith("M-SEARCH"):
            return
        st = re.search(r"(?im)^ST:\s*(\S+)", text)
        target = st.group(1) if st else "upnp:rootdevice"
        reply = (
            "HTTP/1.1 200 OK\r\nCACHE-CONTROL: max-age=120\r\nEXT:\r\n"
            f"LOCATION: http://127.0.0.1:{self.http_port}/rootDesc.xml\r\n"
            "SERVER: fake/1.0 UPnP/1.1 fake/1.0\r\n"
            f"ST: {target}\r\nUSN: uuid:00000000-0000-0000-0000-000000000001::{target}\r\n\r\n"
        )
        self.transport.sendto(reply.encode(), addr)

    async def _description(self, request: web.Request) -> web.Response:
        body = "<root><device>not closed" if self.bad_description else _DEVICE
        return web.Response(text=body, content_type="text/xml")

    async def _scpd(self, request: web.Request) -> web.Response:
        return web.Response(text=_SCPD, content_type="text/xml")

    async def _control(self, request: web.Request) -> web.Response:
        body = await request.text()
        match = re.search(r"<u:(\w+) xmlns:u=", body)
        action = match.group(1) if match else "?"
        args = dict(re.findall(r"<(New\w+)>([^<]*)</New\w+>", body))
        self.calls.append((action, args))
        if self.bad_soap:
            return web.Response(text="<s:Envelope><s:Body><oops", content_type="text/xml")
        code = self.refuse.get(action)
        if action == "AddPortMapping":
            if int(args["NewExternalPort"]) in self.taken_ports:
                code = 718
            elif self.only_permanent and args["NewLeaseDuration"] != "0":
                code = 725
        if code is not None:
            fault = _FAULT.format(code=code, text="refused by the test")
            return web.Response(status=500, text=_ENVELOPE.format(fault), content_type="text/xml")
        out = ""
        if action == "AddPortMapping":
            self.mappings[int(args["NewExternalPort"])] = args
        elif action == "DeletePortMapping":
            self.mappings.pop(int(args["NewExternalPort"]), None)
        elif action == "GetExternalIPAddress":
            out = f"<NewExternalIPAddress>{self.external_ip}</NewExternalIPAddress>"
        answer = f'<u:{action}Response xmlns:u="{SERVICE}">{out}</u:{action}Response>'
        return web.Response(text=_ENVELOPE.format(answer), content_type="text/xml")
