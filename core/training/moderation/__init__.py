"""What a moderated collaboration adds to training: signed evidence against members, and the
moderators' rollback orders.

- ``evidence``       EvidenceBoard: a round's findings signed and published in the DHT (one owned
  subkey per reporter); EvidenceCollector: the backbone reads them once each, to log and report.
- ``repeated``       RepeatedFindings: a screen's finding is signed only once the same sender was
  found in several epochs lately (an honest outlier lands there once); facts are signed at once.
- ``call_evidence``  RefusedCalls: an expert server's refused (poisoned) calls as evidence, one
  accusation per caller per window; the backbone's server collects and reports everyone's.
- ``rollback``       following the moderators' rollback orders: the verified order a replica has
  yet to apply, the last one applied (in snapshots and checkpoints), rollback-aware round names.
"""
