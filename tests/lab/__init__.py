"""Tests that run real processes behind emulated home routers (NAT) in Linux network namespaces.

- ``natlab``: ``NatLab`` builds the topology (a public host, two NAT routers, a home behind each),
  spawns processes inside it and tears it all down; ``sweep_stale`` and ``lab_unavailable``.
- ``netprobe``: stdlib network probes (TCP echo of the peer address, simultaneous open, a
  STUN-like UDP reflector, a rate meter) run inside the namespaces with ``sys.executable``.
- ``conftest``: the ``make_lab`` and ``nat_lab`` fixtures; skip with the reason when no lab can
  be built; stale labs of crashed runs are swept once per session.
- ``test_lab``: the harness checks itself: outbound NAT, blocked inbound, TCP hole punching
  cone/cone but not cone/symmetric, the fullcone port forward, identical LANs, shaping, teardown.

NAT lab
-------
The lab needs Linux, root, ``ip`` and ``tc`` (iproute2) and ``nft`` (nftables)::

    apt-get install -y iproute2 nftables      # Debian/Ubuntu; .ci/run does this when root
    sudo .venv/bin/python -m pytest tests/lab -m lab

Without them every lab test is skipped with the reason. Namespaces are named
``blab<6 hex>-<pid>-<role>``; ``ip netns list`` shows a running lab, and a crashed run's leftovers
are deleted by the next session (only when the process that made them is gone). Tests mark
themselves ``lab``, so ``-m "not lab"`` leaves them out.
"""
