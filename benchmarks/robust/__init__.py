"""Robust training's benchmarks; their figures are on ``docs/benchmarks/robust.md``.

- ``anchored``          a stranger with many identities against a diloco swarm whose state the
                        backbone's key confirms: poisoned donors, records ahead, tiny-weight
                        identities, the backbone away, newcomers' time to join.
- ``at_rest``           whether dedloc's work check still tells zeros, a reused gradient and one
                        loss from honest work once the demo's loss is flat.
- ``aggregation``       the all-reduce with the plain mean, CenteredClip and verified reducers.
- ``byzantine_losses``  loss curves of four trainers, one misbehaving, with and without defences.
- ``byzantine_runs``    running those collaborations (the tests use it too).
- ``byzantine_task``    their task: a seeded regression MLP, its shards and the reference run.
- ``diloco_replay``     a diloco round replayed by a checker: how far honest members (precisions,
                        speeds) and each cheat land from their replay.
- ``claims``            a trainer claiming 10x and 100x the samples it computed, in both modes.
- ``work_checks``       the backbone's spot checks of trainers' work on the demo, and diloco's
                        replayed rounds there (parts of ``claims``).
"""
