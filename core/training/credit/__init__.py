"""Credit: which volunteer is credited what, and on what grounds.

A peer's progress record lists the epochs (diloco: rounds) whose work it saw land, with their
samples (``core.training.progress``). The backbone reads everyone's records; its books
(``core.training.bookkeeping``) hand them to ``metrics``, whose ``MetricsAggregator`` turns them
into each epoch's figures and, through the ``CreditBook``, into one share per peer and epoch, with
what the work checks support of each claim. The epoch's report (``EpochMetrics``) goes to the
backbone's log and, as a ``contribution_report``, to the coordinator's leaderboard.

- ``book``     CreditBook: each (peer, epoch) credited once, late finds as late credit, a gone
  peer's share from its round's weights, credit withdrawn from a peer caught faking work;
  ``Support``, what the checks support of a claim.
- ``metrics``  MetricsAggregator: the epochs' figures and shares from the records; EpochMetrics,
  one epoch's report (or its late credit, or a withdrawal); MetricsLog, their JSON-lines log.
- ``samples``  SamplesTally: the samples behind each checkpoint, the reported epochs summed.
- ``checks/``  dedloc's checked work: a trainer's receipt of every microbatch, the backbone's spot
  checks that recompute a few, and Standings, what the checks support of each claim.
- ``scores``   WorkScores (diloco): what a member's updates show per sample claimed, and the
  credit, accusations and waits that follow from it.
"""
