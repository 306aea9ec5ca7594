"""``barnraise peer`` with a dmoe manifest is a mixture-of-experts trainer: the options that only a
collaborative trainer uses are refused by name, before anything starts."""

from __future__ import annotations

import pytest

from core.cli.main import main
from core.util.process.resources import resource_path

DEMO = resource_path("dmoe-demo/project.toml")


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--data-base", "http://127.0.0.1:9/"], "--data-base: not used"),
        (["--target-batch-size", "64"], "--target-batch-size: not used"),
        (["--verify-reducers"], "--verify-reducers: not used"),
        (["--device", "cuda"], "small local layers on the CPU"),
    ],
)
def test_collaborative_options_are_refused_by_name(
    extra: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["peer", "--manifest", str(DEMO), *extra]) == 1
    err = capsys.readouterr().err
    assert says in err
    assert "Traceback" not in err
