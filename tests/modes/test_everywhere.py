"""A training mode added to the table (and nowhere else) is found everywhere a mode is named,
checked, costed, shown or built: the manifest and its rules, the command lines, the engine's
estimate and dashboard, the app's round line, the project page, the coordinator's rollback command,
the demo's Byzantine swarm, the averager's settings, the exported model's card, and the peer that
trains and the backbone.
Each place that kept a list of its own, or compared the mode's name, would fail here."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from core.modes import MODES, using_modes
from core.project import ManifestError, parse_manifest
from tests.modes.solo import LONGEST_ROUND, SOLO, SOLO_WAIT

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"
TABLE = MODES.with_mode(SOLO)


def demo_text(training: str) -> str:
    text = DEMO.read_text()
    assert text.count("[training]\n") == 1
    return text.replace("[training]\n", f"[training]\n{training}\n")


def test_the_built_in_table_does_not_know_the_new_mode() -> None:
    """Without the wider table in force the same manifest is refused: what the next tests find
    comes from the table, not from somewhere the name was already known."""
    with pytest.raises(ManifestError, match=r"training\.mode: must be one of 'dedloc', 'diloco'"):
        parse_manifest(demo_text('mode = "solo"'))


def test_the_manifest_takes_the_mode_and_holds_it_to_its_rules() -> None:
    with using_modes(TABLE):
        manifest = parse_manifest(demo_text('mode = "solo"'))
        assert manifest.training.mode == "solo"
        with pytest.raises(ManifestError, match="'dedloc', 'diloco', 'solo'; got 'zip'"):
            manifest.with_training(mode="zip")
        # its own rule, which neither shipped mode has
        with pytest.raises(ManifestError, match=r"training\.round_seconds: solo rounds last"):
            manifest.with_training(round_seconds=LONGEST_ROUND + 1)
        assert manifest.with_training(mode="diloco", round_seconds=LONGEST_ROUND + 1)


def test_the_engine_costs_and_shows_it_and_the_app_and_the_page_say_it() -> None:
    from app import wording
    from core.coordinator.page.home import what_it_trains
    from core.engine.join.resource_use import resource_use
    from core.engine.views import rounds_view

    with using_modes(TABLE):
        manifest = parse_manifest(demo_text('mode = "solo"\nround_seconds = 120'))
        use = resource_use(manifest, "cpu", "CPU")
        assert use.network_bytes_per_hour == 360_000
        assert "network: solo peers exchange nothing but their records" in use.notes
        # its rounds end on the shared clock: the dashboard's round line, in the app's words
        rounds = rounds_view(manifest.training, None, now=1_200_030.0)
        assert (rounds.mode, rounds.round_seconds, rounds.round_elapsed) == ("solo", 120.0, 30.0)
        assert wording.rounds_line(rounds) == "Round: 30 s of 2 min · Last exchange: none yet"
        assert wording.rounds_detail(rounds) == SOLO.for_people
        assert what_it_trains(manifest).endswith(
            "trained together by its volunteers, each volunteer alone (the solo mode)."
        )
    # outside the table in force, an engine's "solo" is a mode this app does not know
    assert wording.rounds_line(rounds) is None


def test_the_command_lines_offer_it_and_refuse_what_it_does_not_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from core.cli.main import build_parser, main
    from core.cli.swarm.command import _usage_problem
    from core.trust.identity import Identity

    moderated = tmp_path / "solo.toml"
    moderated.write_text(
        demo_text('mode = "solo"').replace(
            'coordinator_url = ""', 'coordinator_url = "https://coordinator.invalid"'
        )
        + f'\n[access]\nmode = "moderated"\nproject_key = "{Identity.generate().peer_id}"\n'
    )
    database = tmp_path / "coordinator.db"
    database.touch()
    with using_modes(TABLE):
        peer = build_parser("peer").parse_args(["peer", "--manifest", "p.toml", "--mode", "solo"])
        assert peer.mode == "solo"
        swarm = build_parser("swarm").parse_args(
            ["swarm", "--peers", "2", "--byzantine", "1", "--mode", "solo"]
        )
        # the demo's attacks are on rounds of the mode that hosts them
        assert _usage_problem(swarm) == (
            "--byzantine shows the defences of dedloc or diloco rounds; leave out --mode solo"
        )
        # its peers follow no rollback order: the coordinator signs none
        signing = ["coordinator", "rollback", "--to-epoch", "3", "--manifest", str(moderated)]
        assert main([*signing, "--db", str(database)]) == 1
        assert "trains in solo mode ([training] mode), whose peers do not follow" in (
            capsys.readouterr().err
        )
    with pytest.raises(SystemExit):  # the built-in table offers no such choice
        build_parser("peer").parse_args(["peer", "--manifest", "p.toml", "--mode", "solo"])
    assert "invalid choice: 'solo'" in capsys.readouterr().err


def test_the_exported_models_card_says_what_an_epoch_of_the_mode_is() -> None:
    from core.export.card import CardFacts, model_card
    from core.export.records import NotEvaluated

    with using_modes(TABLE):
        manifest = parse_manifest(demo_text('mode = "solo"'))
        facts = CardFacts(
            manifest, "AlbertForMaskedLM", "AutoModelForMaskedLM", "fill-mask", False, "albert",
            "a small ALBERT", 1000, 100, 7, 4096, 3.5, NotEvaluated("not measured"), None, "demo",
        )  # fmt: skip
        card = model_card(facts)
    assert "Each epoch is one microbatch's step, taken by each volunteer alone;" in card
    assert "DiLoCo" not in card
    assert "collaborative batch" not in card


def test_the_averager_waits_as_the_mode_says() -> None:
    pytest.importorskip("torch")  # the peer's settings are torch code
    from core.training.peer.recipe import averager_config

    with using_modes(TABLE):
        manifest = parse_manifest(demo_text('mode = "solo"'))
        config = averager_config(manifest, "trainer")
    assert (config.min_matchmaking_time, config.max_matchmaking_time) == (SOLO_WAIT, SOLO_WAIT)


@pytest.mark.slow
async def test_a_peer_trains_and_a_backbone_reports_in_the_mode(
    demo_data: Path, tmp_path: Path
) -> None:
    """The project peer builds whatever the mode builds: a solo trainer steps alone at every
    microbatch, and the solo backbone reports the epochs that the trainer's records say landed."""
    pytest.importorskip("torch")
    from core.data import ShardServer
    from core.training.peer.project_peer import PeerSettings, ProjectPeer
    from core.worker.events import PeerEpoch, PeerEvent, PeerMetrics, PeerReady

    server = ShardServer(demo_data)
    base = await server.start()
    trained: list[PeerEpoch] = []
    reported: list[PeerMetrics] = []
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def backbone_event(event: PeerEvent) -> None:
        if isinstance(event, PeerReady) and not ready.done():
            ready.set_result(event.address)
        if isinstance(event, PeerMetrics):
            reported.append(event)

    def trainer_event(event: PeerEvent) -> None:
        if isinstance(event, PeerEpoch):
            trained.append(event)

    try:
        with using_modes(TABLE):
            manifest = parse_manifest(demo_text('mode = "solo"'), path=DEMO)
            async with contextlib.AsyncExitStack() as stack:
                aux = ProjectPeer(
                    PeerSettings(
                        manifest, work_dir=tmp_path / "backbone", role="backbone", data_base=base
                    ),
                    backbone_event,
                )
                stack.push_async_callback(aux.close)
                stop = asyncio.Event()
                running = asyncio.create_task(aux.run(stop), name="test/solo-backbone")
                address = await asyncio.wait_for(asyncio.shield(ready), 60)
                peer = ProjectPeer(
                    PeerSettings(
                        manifest,
                        work_dir=tmp_path / "peer",
                        data_base=base,
                        initial_peers=(address,),
                        until_epoch=3,
                    ),
                    trainer_event,
                )
                stack.push_async_callback(peer.close)
                await asyncio.wait_for(peer.run(asyncio.Event()), 120)
                for _ in range(100):  # the backbone reads the records a few times a second
                    if len(reported) >= 2:
                        break
                    await asyncio.sleep(0.2)
                stop.set()
                await asyncio.wait_for(running, 30)
    finally:
        await server.close()

    micro = manifest.training.microbatch_size
    assert [(e.epoch, e.samples, e.summary) for e in trained] == [
        (epoch, micro, "alone") for epoch in range(3)
    ]
    assert [m.epoch for m in reported][:2] == [0, 1]
    assert all(m.samples == micro for m in reported)
