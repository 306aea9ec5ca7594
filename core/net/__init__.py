"""Peer identity, authenticated connections and RPC.

- ``peer_id``      PeerID: libp2p-style identity multihash of the Ed25519 public key, base58btc.
- ``identity``     Identity: the private key, loaded from or created in a 0600 file.
- ``address``      PeerAddress: multiaddr-style (and short ``host:port@PeerID``) addresses, relays.
- ``certificate``  TLS certificates carrying an identity proof; the public network root.
- ``tls``          SSL contexts (TLS 1.3, mutual certificates) and reading the proven PeerID.
- ``frames``       the frame format and an incremental, I/O-free decoder.
- ``hello``        the first message of each connection (version, window, listen addresses, pass).
- ``passes``       AccessPass: a project's signed {user, peer key, expiry}; issuing and checking.
- ``evidence``     Evidence: a member's signed accusation against another in an averaging round
  (who, which round, part and chunk, the statistic); signing and checking, wire and JSON forms.
- ``rollback``     RollbackOrder: the moderators' signed "back to the checkpoint of epoch N";
  signing and checking, its text form.
- ``gate``         AccessGate: our pass, the revoked peer keys, and admitting peers by their pass.
- ``link``         Link and StreamLink: the protocols through which calls and streams use their
  connection (so that none of them imports ``connection``: the package has no import cycle).
- ``stream``       Stream: messages and raw data both ways inside a call, credit flow control.
- ``rpc``          Method/StreamMethod, CallContext and the Router of handlers.
- ``calls_in``     IncomingCalls: the calls the peer opens, checked, run as named tasks, answered once.
- ``calls_out``    OutgoingCalls and CallStream: the calls we open, their ids, deadlines and outcomes.
- ``lifecycle``    Phase and Event: a connection's life as one state, and its only legal transitions.
- ``connection``   Connection: the asyncio protocol multiplexing calls over one TLS link.
- ``pings``        Pings: round-trip probes on one connection (a random token, echoed).
- ``host``         Host: listen, dial, reuse connections, idle timeouts, graceful close.
- ``admission``    Admission: inbound handshakes bounded per address, per /24 or /56 and in all;
  a crowd drops its own oldest (silent first), never the newcomer.
- ``first_bytes``  waiting for a new connection's first bytes before TLS (silence costs a socket).
- ``transport_cycles`` letting a closed asyncio transport be freed at once (3.11's self-reference).
- ``peerstore``    PeerStore: the addresses of the peers we heard of, bounded in peers and per peer.
- ``ports``        the default listening port of each role, and listen addresses for every interface.
- ``advertise``    which of our addresses other peers are given (never loopback or link-local,
  except in a swarm inside one computer): confirmed public, interfaces, relays.
- ``dialing``      the order addresses are tried in, and staggered parallel attempts (first wins).
- ``presence``     Presence: reachability checks, relays (used or offered), hole punching, port
  mapping and meeting peers, composed for one Host and steered by its reachability.
- ``host_access``  HostAccess: in moderated projects a Host admits only peers with a valid pass,
  pushes our renewed pass, and drops peers whose pass is revoked or expired.
- ``relay_messages``  the relay protocol: reserve / connect / incoming methods, their messages,
  RelayStatus reasons, RelayRefused.
- ``relay_limits``  RelayLimits: what a relay grants (reservations, circuits, bytes, time), with why.
- ``relay_reservations``  Reservations: the peers a relay keeps reachable, per-address and per-peer limits.
- ``relay_splice``  Splice: the relay's half of a circuit, pumping two streams within the limits.
- ``relay_service``  RelayService: a public peer serving reservations and circuits.
- ``circuit``      Circuit: our end of a relayed circuit as a socket transport that TLS runs over.
- ``relay_dialer``  RelayDialer: dialing ``relay:<relay>/<peer>`` from any Host; our circuits.
- ``relay_client``  RelayClient: keeping reservations on relays, accepting their circuits.
- ``punch_timing`` PunchTiming, Backoff, RateLimit: when each side of a hole punch fires, its
  rounds, and when a pair or a requester may try again (pure).
- ``punch_candidates`` PunchOffer: the addresses traded before a punch; which we offer and dial.
- ``punch_dial``   the punching sockets: connects from our listening port, repeated for a window.
- ``punch_messages`` the hole-punch protocol's messages (CONNECT, SYNC) and PunchStats.
- ``punch``        HolePuncher: moves relayed connections onto direct ones by TCP simultaneous
  open (CONNECT/SYNC over the relay, fixed TLS roles, back-off, refusals, stats).
- ``bandwidth``    upload and download limits: token buckets shared by a Host's connections.
- ``observed``     ObservedAddresses: the IPs peers say they see us at, ranked by distinct observer
  networks; says when it changes (a network change).
- ``reachability`` Reachability (PUBLIC / PRIVATE / UNKNOWN) and its Classifier of dial-back answers.
- ``dialback``     DialbackService: dials an asking peer back at its own IP, on a fresh connection.
- ``dialback_limits`` DialbackLimits and DialbackBudget: the service's rate limits.
- ``reachability_monitor`` ReachabilityMonitor: asks peers for dial-backs, keeps the verdict and the
  host's confirmed address up to date, re-checks on changes and periodically.
- ``connection_kinds`` our peers counted by how we reach them: direct, hole-punched, relayed.
- ``traffic``      Traffic: bytes sent and received by a Host's connections (for the ledger).
- ``config``       NetConfig: limits and timeouts.
- ``errors``       the error hierarchy, including RPC errors rebuilt from wire codes.
- ``portmap``      PortMapper: asking a home router (UPnP-IGD, NAT-PMP) to forward our listening port.
- ``base_errors``  NetError and PeerIdError, apart so that ``peer_id`` and ``errors`` need not import
  each other (``errors`` re-exports them).
"""

from core.net.address import PeerAddress
from core.net.config import NetConfig
from core.net.host import Host, StreamCall
from core.net.identity import Identity
from core.net.peer_id import PeerID
from core.net.rpc import CallContext, Method, StreamMethod
from core.net.stream import EndOfStream, Stream

__all__ = [
    "CallContext",
    "EndOfStream",
    "Host",
    "Identity",
    "Method",
    "NetConfig",
    "PeerAddress",
    "PeerID",
    "Stream",
    "StreamCall",
    "StreamMethod",
]
