"""The bundles' generated files (spec, .desktop, Debian control files, Inno Setup script,
Info.plist) and the icon files, checked without building anything (``packaging/bundle.py`` and
``packaging/smoke_linux.py`` build and run the real thing)."""

from __future__ import annotations

import configparser
import importlib.util
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"


def load(name: str) -> ModuleType:
    """A script of ``packaging/`` (not a package: its folder goes on the path, as when it runs)."""
    if str(PACKAGING) not in sys.path:
        sys.path.insert(0, str(PACKAGING))
    spec = importlib.util.spec_from_file_location(name, PACKAGING / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


files = load("installer_files")
icons = load("icons")
bundle = load("bundle")


def test_the_desktop_entry_parses_and_runs_the_app() -> None:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(files.desktop_entry("/opt/barnraise/barnraise"))
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application"
    assert entry["Name"] == "Barnraise"
    assert entry["Exec"] == "/opt/barnraise/barnraise app"
    assert entry["Icon"] == "barnraise"
    assert entry["Terminal"] == "false"
    assert entry["Categories"].endswith(";")


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils")
def test_desktop_file_validate_accepts_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "barnraise.desktop"
    path.write_text(files.desktop_entry())
    done = subprocess.run(
        ["desktop-file-validate", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout
    assert not done.stdout.strip(), done.stdout


def control_fields(text: str) -> dict[str, str]:
    """A Debian control paragraph: ``Field: value`` lines, continuation lines start with a space."""
    fields: dict[str, str] = {}
    last = ""
    for line in text.rstrip("\n").split("\n"):
        assert line, "no empty line inside one paragraph"
        if line.startswith(" "):
            fields[last] += "\n" + line
        else:
            name, sep, value = line.partition(": ")
            assert sep, line
            assert name.replace("-", "").isalnum(), line
            fields[name] = value
            last = name
    return fields


def test_the_deb_control_file_has_the_fields_dpkg_needs() -> None:
    fields = control_fields(files.deb_control("1.2.3", "amd64", 612345))
    for name in ("Package", "Version", "Architecture", "Maintainer", "Description"):
        assert fields[name], name
    assert fields["Package"] == "barnraise"
    assert fields["Version"] == "1.2.3"
    assert fields["Installed-Size"] == "612345"
    assert "libxcb-cursor0" in fields["Depends"]
    synopsis, *extended = fields["Description"].split("\n")
    assert len(synopsis) <= 80
    assert extended
    assert all(line.startswith(" ") and len(line) <= 80 for line in extended)


@pytest.mark.parametrize("script", ["deb_postinst", "deb_postrm", "add_to_menu"])
def test_the_shell_scripts_parse(script: str, tmp_path: Path) -> None:
    text = getattr(files, script)()
    assert text.startswith("#!/bin/sh\n")
    path = tmp_path / "script"
    path.write_text(text)
    subprocess.run(["sh", "-n", str(path)], check=True)


def test_postrm_removes_the_program_folder_only_on_remove_and_purge() -> None:
    text = files.deb_postrm()
    assert "remove|purge)" in text
    assert "rm -rf /opt/barnraise\n" in text
    assert "upgrade" not in text


def test_the_windows_installer_has_a_start_menu_entry_and_an_uninstaller(tmp_path: Path) -> None:
    iss = files.inno_setup("1.2.3", tmp_path / "src", tmp_path / "out", tmp_path / "b.ico")
    assert "AppVersion=1.2.3" in iss
    assert "PrivilegesRequired=lowest" in iss
    assert '"{group}\\Barnraise"; Filename: "{app}\\barnraisew.exe"; Parameters: "app"' in iss
    assert '"{group}\\Uninstall Barnraise"; Filename: "{uninstallexe}"' in iss
    assert 'Filename: "{app}\\barnraise.exe"; Parameters: "ctl shutdown"' in iss
    assert "{{6F1C4E0B-" in iss  # the fixed AppId, its brace escaped


def test_the_info_plist_names_the_program_and_its_icon() -> None:
    plist = plistlib.loads(files.info_plist("1.2.3"))
    assert plist["CFBundleExecutable"] == "barnraise"
    assert plist["CFBundleShortVersionString"] == "1.2.3"
    assert (ROOT / "resources" / "icons" / plist["CFBundleIconFile"]).is_file()


@pytest.mark.parametrize("target", ["linux", "windows", "macos"])
@pytest.mark.parametrize("torch", [False, True])
def test_the_specs_are_python_and_leave_torch_out_of_light_bundles(
    target: str, torch: bool, tmp_path: Path
) -> None:
    spec = files.SpecInput(
        target, ROOT, PACKAGING / "frozen_entry.py", tmp_path / "i", torch, "1.2.3", tmp_path / "p"
    )
    text = files.pyinstaller_spec(spec)
    compile(text, "barnraise.spec", "exec")
    assert ("'torch'" in text) is not torch  # in the excludes of the light bundle only
    assert text.count("EXE(") == (2 if target == "windows" else 1)
    assert ("console=False" in text) is (target in ("windows", "macos"))
    assert ("console=True" in text) is (target != "macos")
    assert ("BUNDLE(" in text) is (target == "macos")


def test_bundle_refuses_another_systems_target_and_writes_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = "windows" if sys.platform.startswith("linux") else "linux"
    assert bundle.main([other]) == 2
    said = capsys.readouterr().err
    assert f"the {other} target builds on" in said
    assert f"'bundle.py files {other}'" in said
    for target, expected in (
        ("windows", {"spec", "iss"}),
        ("macos", {"spec", "Info.plist"}),
        ("linux", {"spec", "desktop"}),
    ):
        written = bundle.write_files(target, torch=False, work=tmp_path / target)
        assert set(written) == expected
        assert all(path.is_file() for path in written.values())


def test_the_icon_files_are_there_at_their_sizes() -> None:
    assert icons.problems() == []


def test_ico_and_icns_round_trip(tmp_path: Path) -> None:
    png = (ROOT / "resources" / "icons" / "barnraise-16.png").read_bytes()
    dib = icons.dib_bytes(2, 2, bytes(range(16)))
    assert icons.image_size(dib) == (2, 2)
    ico = icons.read_ico(icons.ico_bytes([dib, png]))
    assert [(w, h) for w, h, _ in ico] == [(2, 2), (16, 16)]
    assert ico[1][2] == png
    assert icons.read_icns(icons.icns_bytes({"icp4": png})) == {"icp4": png}
    with pytest.raises(ValueError, match="at most 256"):
        icons.ico_bytes([(ROOT / "resources" / "icons" / "barnraise-512.png").read_bytes()])
