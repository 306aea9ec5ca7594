"""Who can reach us: the addresses peers see, dial-back checks and home-router port mapping.

- ``observed``        ObservedAddresses: the IPs peers say they see us at, ranked by distinct
  observer networks; says when it changes (a network change).
- ``reachability``    Reachability (PUBLIC / PRIVATE / UNKNOWN) and its Classifier of dial-back answers.
- ``dialback``        DialbackService: dials an asking peer back at its own IP, on a fresh connection.
- ``dialback_limits`` DialbackLimits and DialbackBudget: the service's rate limits.
- ``monitor``         ReachabilityMonitor: asks peers for dial-backs, keeps the verdict and the
  host's confirmed address up to date, re-checks on changes and periodically.
- ``portmap/``        PortMapper: asking a home router (UPnP-IGD, NAT-PMP) to forward our listening port.
"""
