"""What the backbone reports and the coordinator keeps: contributions per epoch, the figures and the
leaderboard, accusations, receipts for expert work, and the moderators' rollback orders. The
reports' bodies and their bounds are ``core.trust.reports``, which the senders build with.

- ``epoch_report``      which contributions of the backbone's epoch report count: each one's
  pass and account.
- ``evidence_report``     reading the backbone's evidence report: each accusation's signature,
  project, age, and the standing of the account that proved the reporter's key; a rate per account.
- ``records``      passes handed out per user and peer key; contributions per epoch, totals, days.
- ``figures``      the epoch figures a report may carry (loss, speed, live peers): one row per
  epoch, the newest and the loss curve's points.
- ``evaluations``  the backbone's held-out evaluations (``POST /evaluations``): one row per epoch,
  the newest and the held-out curve's points.
- ``evidence_records`` the accepted accusations, and the listing by accused peer (with its user and
  how many distinct accounts accused it) that ``barnraise coordinator reports`` prints.
- ``receipts``     trainers' signed receipts for expert servers' work (``POST /receipts``): which
  count, the credit (newest running total less what was credited), the rows, and the audit's
  queries (credit per account, receipts whose signature no longer checks).
- ``leaderboard``  top N, one user's rank, percentile and neighbours, daily history.
- ``peer_credit``  what one peer key was credited, in all and epoch by epoch (``GET /credit/mine``),
  for the account that proved the key, to compare with its engine's own count.
- ``rollback``     the moderators' signed rollback orders: numbered, checked against the epochs
  reported, stored; the latest is what ``GET /rollback`` serves to every peer.
"""
