"""The service files: quoted for where they go, so every command reads back as it was written."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from core.organize.services import env_file_text, systemd_word
from core.util.errors import ConfigError
from tests.organize.conftest import answers, make_project
from tests.organize.units import (
    compose_commands,
    env_file,
    read_unit,
    systemd_path,
    systemd_words,
)

AWKWARD = "/tmp/a folder/with 'quotes' \"and\" 100% $HOME \\ ;"


@pytest.mark.parametrize(
    "word", ["plain", "", ";", "a b", "100%", "$HOME", 'say "hi"', "back\\slash", AWKWARD]
)
def test_a_systemd_word_reads_back_as_it_was(word: str) -> None:
    assert systemd_words(f"exe {systemd_word(word)} end") == ["exe", word, "end"]


def test_control_characters_are_refused() -> None:
    with pytest.raises(ConfigError, match="control character"):
        systemd_word("two\nlines")


@pytest.mark.parametrize("password", ["plain password", 'with "double" $VAR \\ # ; `x` %d'])
def test_the_env_file_holds_the_password_for_systemd_compose_and_sh(
    tmp_path: Path, password: str
) -> None:
    path = tmp_path / "backbone.env"
    path.write_text(env_file_text(password))
    assert env_file(path) == {"BARNRAISE_PASSWORD": password}
    said = subprocess.run(
        ["sh", "-c", 'set -a; . "$1"; set +a; printf %s "$BARNRAISE_PASSWORD"', "sh", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert said == password


def test_units_and_compose_run_the_same_commands_in_an_awkward_folder(tmp_path: Path) -> None:
    folder = tmp_path / "my project 100% $HOME"
    made = make_project(folder, answers("awkward", public_url="https://coord.example.org"))
    services = folder / "services"
    compose = compose_commands(services / "compose.yaml")
    for program in made.programs:
        unit = read_unit(services / f"{program.unit}.service")
        service = unit["Service"]
        assert systemd_path(service["WorkingDirectory"][0]) == str(folder)
        assert systemd_words(service["Environment"][0]) == [f"BARNRAISE_HOME={folder}/state"]
        assert service["User"] == ["barnraise"]
        assert service["Restart"] == ["on-failure"]
        command = systemd_words(service["ExecStart"][0])
        assert command[-len(program.args) :] == list(program.args)
        assert command[1:3] == ["--log-level", "info"]
        assert compose[program.name] == [*command[1:]]
        if program.logs_in:
            assert systemd_path(service["EnvironmentFile"][0]) == str(services / "backbone.env")
        else:
            assert "EnvironmentFile" not in service
    (coordinator,) = [p.args for p in made.programs if p.name == "coordinator"]
    # an https:// public URL: behind a proxy on this machine, which the rate limits trust
    assert coordinator[coordinator.index("--host") + 1] == "127.0.0.1"
    assert coordinator[coordinator.index("--port") + 1] == "8470"
    assert coordinator[coordinator.index("--trusted-proxy") + 1 :][:2] == (
        "127.0.0.1/32",
        "::1/128",
    )
    readme = (services / "README.txt").read_text()
    assert "reverse_proxy 127.0.0.1:8470" in readme
    assert made.project_url in readme
    for port in ("4003/tcp", "8470/tcp", "4002/tcp"):
        assert port in readme


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    folder = tmp_path / "my project 100%"
    made = make_project(folder)
    units = [str(folder / "services" / f"{p.unit}.service") for p in made.programs]
    verified = subprocess.run(
        ["systemd-analyze", "verify", *units],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verified.returncode == 0, verified.stderr
    assert verified.stderr.strip() == ""


def test_compose_file_is_yaml_with_the_services(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    made = make_project(tmp_path / "proj", answers(mode="moderated"))
    document = yaml.safe_load((tmp_path / "proj" / "services" / "compose.yaml").read_text())
    assert set(document["services"]) == {p.name for p in made.programs}
    backbone = document["services"]["backbone"]
    assert backbone["network_mode"] == "host"  # merged from the anchor
    assert backbone["env_file"] == "backbone.env"
    assert backbone["build"] == {"context": ".", "dockerfile": "Containerfile"}  # no keys sent
    assert backbone["volumes"] == ["..:/project"]
    assert backbone["depends_on"] == ["coordinator", "dht"]
    assert document["services"]["dht"]["depends_on"] == ["coordinator"]  # it logs in first
    assert "depends_on" not in document["services"]["coordinator"]
