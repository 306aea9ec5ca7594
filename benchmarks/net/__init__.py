"""The network's benchmarks; their figures are on ``docs/benchmarks/net.md``.

- ``transport``         RPC round trips and tensor streams between two processes, beside raw TCP.
- ``dht``               DHT node start, stores and gets, beside hivemind's DHT.
- ``allreduce``         matchmaking and the all-reduce of N peer processes, beside hivemind's.
- ``load_balancing``    the all-reduce over links of different speeds: LP shares against equal ones.
- ``nat``               the NAT lab: connection set-up, relayed against direct, an all-reduce (root).
- ``relay_throughput``  one stream direct against through a relay.
- ``flood``             a DHT node under a flood of idle connections, or of stores.
- ``access``            what access control costs: moderated connections, pass checks, the
                        coordinator.
"""
