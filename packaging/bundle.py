"""Build Barnraise's bundles and installers with PyInstaller, one target per operating system.

    .venv/bin/python packaging/bundle.py linux     # dist/*.tar.gz and dist/*.deb   (on Linux)
    .venv/bin/python packaging/bundle.py windows   # dist/*-setup.exe (Inno Setup)  (on Windows)
    .venv/bin/python packaging/bundle.py macos     # dist/*.dmg holding Barnraise.app (on macOS)
    .venv/bin/python packaging/bundle.py files TARGET   # only write TARGET's spec and installer
                                                        # files under build/bundle/ (any system)

``--torch first-run`` (the default) leaves torch out: the app fetches the torch build that suits the
computer on first run (``barnraise torch``). ``--torch bundled`` puts the build environment's torch
in the bundle. PyInstaller is a build tool, not a dependency: ``pip install pyinstaller`` in the
environment the bundle is built from (the ``build`` extra). Each target builds only on its own
system, since PyInstaller freezes the Python and libraries it runs with.

Work files go to ``build/bundle/TARGET/``, results to ``dist/``, with ``dist/bundle-TARGET.json``
listing each artifact's size and the build's duration.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import icons  # packaging/, beside this script
import installer_files as files

ROOT = Path(__file__).resolve().parent.parent
ENTRY = ROOT / "packaging" / "frozen_entry.py"
BUILD = ROOT / "build" / "bundle"
DIST = ROOT / "dist"
ICONS = ROOT / "resources" / "icons"
TARGETS = {"linux": "linux", "windows": "win32", "macos": "darwin"}
"""Each target and the ``sys.platform`` it builds on."""
SYSTEM_NAMES = {"linux": "Linux", "windows": "Windows", "macos": "macOS"}
DEB_PREFIX = "/opt/barnraise"
PIP_AT_LEAST = (24, 1)
"""``--progress-bar raw``, which ``barnraise torch install`` reads, came with pip 24.1."""


class Refused(Exception):
    """The build cannot go on here; the message says why and what to do."""


def version() -> str:
    sys.path.insert(0, str(ROOT))
    from core import __version__  # noqa: PLC0415

    return __version__


def host_target() -> str | None:
    return next((t for t, plat in TARGETS.items() if sys.platform.startswith(plat)), None)


def check_host(target: str) -> None:
    here = host_target()
    if here != target:
        raise Refused(
            f"the {target} target builds on {SYSTEM_NAMES[target]} only "
            f"(this is {platform.system() or sys.platform}): PyInstaller freezes the Python and "
            f"libraries it runs with. 'bundle.py files {target}' writes its spec and installer "
            "files here for review."
        )


def machine() -> tuple[str, str]:
    """(Debian architecture, the name used in file names)."""
    arch = platform.machine().lower()
    debian = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
    return debian.get(arch, arch), arch


def artifact_stem(target: str, torch: bool) -> str:
    arch = machine()[1] if target == "linux" else {"windows": "x64", "macos": "universal"}[target]
    suffix = "-with-torch" if torch else ""
    return f"barnraise-{version()}-{target}-{arch}{suffix}"


def write_files(target: str, torch: bool, work: Path | None = None) -> dict[str, Path]:
    """The spec and the target's installer files, in ``work`` (``build/bundle/TARGET/``)."""
    work = work or BUILD / target
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    plist = None
    if target == "macos":
        plist = out["Info.plist"] = work / "Info.plist"
        plist.write_bytes(files.info_plist(version()))
    icon = ICONS / ("barnraise.icns" if target == "macos" else "barnraise.ico")
    spec = files.SpecInput(target, ROOT, ENTRY, icon, torch, version(), plist)
    out["spec"] = work / "barnraise.spec"
    out["spec"].write_text(files.pyinstaller_spec(spec))
    if target == "windows":
        out["iss"] = work / "barnraise.iss"
        source = work / "dist" / files.COMMAND
        out["iss"].write_text(files.inno_setup(version(), source, DIST, icon), encoding="utf-8")
    if target == "linux":
        out["desktop"] = work / "barnraise.desktop"
        out["desktop"].write_text(files.desktop_entry())
    return out


def freeze(target: str, spec: Path) -> Path:
    """Run PyInstaller on the spec; the one-folder program it made."""
    try:
        import PyInstaller  # noqa: F401, PLC0415
    except ImportError as missing:
        raise Refused(
            f"PyInstaller is not installed in {sys.prefix}: run "
            f"'{sys.executable} -m pip install pyinstaller' (the build extra), then again"
        ) from missing
    pip = tuple(int(part) for part in metadata.version("pip").split(".")[:2])
    if pip < PIP_AT_LEAST:
        raise Refused(
            f"the bundle carries the build environment's pip, {metadata.version('pip')}, and the "
            "first-run torch fetch needs its raw progress lines (pip 24.1 or later): run "
            f"'{sys.executable} -m pip install -U \"pip>=24.1\"' (the build extra), then again"
        )
    dist = BUILD / target / "dist"
    command = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--clean",
        "--log-level=WARN",
        f"--distpath={dist}",
        f"--workpath={BUILD / target / 'work'}",
        str(spec),
    ]
    print("$ " + " ".join(command), flush=True)
    subprocess.run(command, cwd=ROOT, check=True)
    return dist / files.COMMAND


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_dir())


def _copy_icons(share: Path) -> None:
    hicolor = share / "icons" / "hicolor"
    for size in icons.PNG_SIZES:
        folder = hicolor / f"{size}x{size}" / "apps"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy2(icons.png_path(size), folder / "barnraise.png")
    (hicolor / "scalable" / "apps").mkdir(parents=True, exist_ok=True)
    shutil.copy2(ICONS / "barnraise.svg", hicolor / "scalable" / "apps" / "barnraise.svg")


def tarball(program: Path, stem: str) -> Path:
    """``STEM.tar.gz``: the program folder, its menu entry and icons, and ``add-to-menu.sh``."""
    stage = BUILD / "linux" / "tar" / stem
    shutil.rmtree(stage.parent, ignore_errors=True)
    shutil.copytree(program, stage, symlinks=True)
    share = stage / "share"
    (share / "applications").mkdir(parents=True)
    (share / "applications" / "barnraise.desktop").write_text(files.desktop_entry())
    _copy_icons(share)
    script = stage / "add-to-menu.sh"
    script.write_text(files.add_to_menu())
    script.chmod(0o755)
    out = DIST / f"{stem}.tar.gz"
    with tarfile.open(out, "w:gz", compresslevel=6) as tar:
        tar.add(stage, arcname=stem, filter=_owned_by_root)
    return out


def _owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def deb(program: Path, stem: str) -> Path:
    """The Debian package: ``/opt/barnraise``, ``/usr/bin/barnraise``, the menu entry, icons."""
    arch = machine()[0]
    stage = BUILD / "linux" / "deb" / "root"
    shutil.rmtree(stage.parent, ignore_errors=True)
    prefix = stage / DEB_PREFIX.lstrip("/")
    prefix.parent.mkdir(parents=True)
    shutil.copytree(program, prefix, symlinks=True)
    (stage / "usr" / "bin").mkdir(parents=True)
    (stage / "usr" / "bin" / "barnraise").symlink_to(f"{DEB_PREFIX}/barnraise")
    share = stage / "usr" / "share"
    (share / "applications").mkdir(parents=True)
    (share / "applications" / "barnraise.desktop").write_text(files.desktop_entry())
    _copy_icons(share)
    control = stage / "DEBIAN"
    control.mkdir()
    installed_kib = (size_of(stage) + 1023) // 1024
    (control / "control").write_text(files.deb_control(version(), arch, installed_kib))
    for name, text in (("postinst", files.deb_postinst()), ("postrm", files.deb_postrm())):
        (control / name).write_text(text)
        (control / name).chmod(0o755)
    for path in [stage, *stage.rglob("*")]:  # dpkg wants 0755 folders, whatever the umask
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    out = DIST / f"barnraise_{version()}_{arch}{'_with-torch' if 'with-torch' in stem else ''}.deb"
    command = ["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(stage), str(out)]
    if shutil.which("dpkg-deb") is None:
        raise Refused("dpkg-deb is missing: on Debian or Ubuntu, 'apt install dpkg'")
    print("$ " + " ".join(command), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return out


def inno(iss: Path) -> Path:
    iscc = shutil.which("iscc") or shutil.which("ISCC")
    default = Path(os.environ.get("PROGRAMFILES(X86)", r"C:\Program Files (x86)"))
    if iscc is None and (default / "Inno Setup 6" / "ISCC.exe").is_file():
        iscc = str(default / "Inno Setup 6" / "ISCC.exe")
    if iscc is None:
        raise Refused(
            f"Inno Setup 6 is missing (https://jrsoftware.org/isinfo.php, or 'winget install "
            f"JRSoftware.InnoSetup'); the program folder is built, and {iss} is ready for iscc"
        )
    subprocess.run([iscc, "/Q", str(iss)], check=True)
    return max(DIST.glob("*-setup.exe"), key=lambda p: p.stat().st_mtime)


def dmg(app: Path, stem: str) -> Path:
    """``STEM.dmg``: Barnraise.app beside a link to /Applications, to drag it onto."""
    stage = BUILD / "macos" / "dmg"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    shutil.copytree(app, stage / app.name, symlinks=True)
    (stage / "Applications").symlink_to("/Applications")
    out = DIST / f"{stem}.dmg"
    out.unlink(missing_ok=True)
    command = ["hdiutil", "create", "-volname", files.APP_NAME, "-srcfolder", str(stage)]
    subprocess.run([*command, "-ov", "-format", "UDZO", str(out)], check=True)
    return out


def build(target: str, torch: bool, *, deb_too: bool = True) -> dict[str, object]:
    check_host(target)
    problems = icons.problems()
    if problems:
        raise Refused("icon files: " + "; ".join(problems) + " (run packaging/icons.py)")
    started = time.monotonic()
    written = write_files(target, torch)
    program = freeze(target, written["spec"])
    frozen_s = time.monotonic() - started
    DIST.mkdir(exist_ok=True)
    stem = artifact_stem(target, torch)
    artifacts: list[Path] = []
    if target == "linux":
        artifacts.append(tarball(program, stem))
        if deb_too:
            artifacts.append(deb(program, stem))
    elif target == "windows":
        artifacts.append(inno(written["iss"]))
    else:
        artifacts.append(dmg(program.parent / f"{files.APP_NAME}.app", stem))
    report: dict[str, object] = {
        "target": target,
        "version": version(),
        "torch": "bundled" if torch else "first-run",
        "program_folder_bytes": size_of(program),
        "artifacts": {p.name: p.stat().st_size for p in artifacts},
        "freeze_seconds": round(frozen_s, 1),
        "total_seconds": round(time.monotonic() - started, 1),
    }
    (DIST / f"bundle-{target}{'-with-torch' if torch else ''}.json").write_text(
        json.dumps(report, indent=2) + "\n"
    )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("target", choices=[*TARGETS, "files"])
    parser.add_argument("files_target", nargs="?", choices=list(TARGETS), help="with 'files'")
    parser.add_argument(
        "--torch",
        choices=["first-run", "bundled"],
        default="first-run",
        help="leave torch out, fetched on first run (default), or put it in the bundle",
    )
    parser.add_argument(
        "--no-deb", action="store_true", help="linux: only the tarball (xz takes minutes)"
    )
    args = parser.parse_args(argv)
    torch = args.torch == "bundled"
    try:
        if args.target == "files":
            if args.files_target is None:
                parser.error("'files' needs a target: linux, windows or macos")
            for name, path in write_files(args.files_target, torch).items():
                print(f"{name:10} {path.relative_to(ROOT)}")
            return 0
        report = build(args.target, torch, deb_too=not args.no_deb)
    except Refused as why:
        print(f"bundle.py: {why}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
