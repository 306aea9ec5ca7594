"""The Host: listening, dialing, admitting peers and keeping their connections.

- ``host``        Host: the connections by peer, the router, graceful close; composes the halves below.
- ``inbound``     Inbound: the listening sockets and an accepted connection's way to admission.
- ``outbound``    Outbound: dialing a peer (staggered attempts over its addresses) and reusing
  an open connection.
- ``address``     PeerAddress: multiaddr-style (and short ``host:port@PeerID``) addresses, relays.
- ``advertise``   which of our addresses other peers are given (never loopback or link-local,
  except in a swarm inside one computer): confirmed public, interfaces, relays.
- ``dialing``     the order addresses are tried in, and staggered parallel attempts (first wins).
- ``admission``   Admission: inbound handshakes bounded per address, per /24 or /56 and in all;
  a crowd drops its own oldest (silent first), never the newcomer.
- ``first_bytes`` waiting for a new connection's first bytes before TLS (silence costs a socket).
- ``transport_cycles`` letting a closed asyncio transport be freed at once (3.11's self-reference).
- ``certificate`` TLS certificates carrying an identity proof; the public network root.
- ``tls``         SSL contexts (TLS 1.3, mutual certificates) and reading the proven PeerID.
- ``gate``        AccessGate: our pass, the revoked peer keys, and admitting peers by their pass.
- ``access``      HostAccess: in moderated projects a Host admits only peers with a valid pass,
  pushes our renewed pass, and drops peers whose pass is revoked or expired.
- ``peerstore``   PeerStore: the addresses of the peers we heard of, bounded in peers and per peer.
"""
