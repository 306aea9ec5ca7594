"""Smoke test of the Linux bundles ``bundle.py linux`` built: unpack, install, run, remove.

    .venv/bin/python packaging/smoke_linux.py [--shots DIR] [--with-torch] [--torch-from DIR]
                                              [--no-deb]

Not part of the test suite (it takes minutes and, for the .deb, root): run it after building.

1. The tarball, unpacked into an empty folder: ``barnraise --version``; no library of the bundle
   misses another (``ldd``); ``barnraise engine --headless`` started, seen by ``barnraise ctl
   status``, stopped by ``barnraise ctl shutdown``; ``barnraise torch install`` against an index
   that cannot be reached says so (offline); with ``--torch-from DIR`` (a folder of wheels, e.g.
   ``/opt/wheels`` beside a ``file://`` index), torch is fetched and a second process of the
   bundle imports it (``barnraise torch status``).
2. The app under Xvfb with a fresh user folder: a screenshot of what a volunteer sees first (the
   torch dialog, offline here), and one once torch is there.
3. The .deb, installed as the README tells volunteers (``apt-get install ./….deb``, which also
   installs the system libraries it depends on; ``dpkg -i`` where there is no apt-get): the files
   where they belong, ``/usr/bin/barnraise --version``, the app from the menu entry's command, a
   screenshot; ``dpkg -r``, then nothing of it is left.

Everything runs with ``BARNRAISE_HOME`` in a temporary folder, so the user's own Barnraise is never
touched. Screenshots go to ``--shots`` (``/tmp/barnraise-bundle-shots``), with ``smoke.json``:
sizes, timings and what each step found.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
UNREACHABLE = "http://127.0.0.1:9/simple"  # the discard port: nothing listens
SCREEN = "1280x800x24"


class SmokeFailed(Exception):
    pass


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SmokeFailed(what)


def run(
    command: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    print("$ " + " ".join(command), flush=True)
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    for line in (done.stdout + done.stderr).strip().splitlines()[-6:]:
        print(f"    {line[:160]}")
    return done


def newest(pattern: str, with_torch: bool) -> Path:
    """The newest file of ``dist/`` matching, of the light kind or the one with torch."""
    found = sorted(
        (p for p in DIST.glob(pattern) if ("with-torch" in p.name) is with_torch),
        key=lambda p: p.stat().st_mtime,
    )
    kind = "with torch" if with_torch else "light"
    check(bool(found), f"no {pattern} ({kind}) in {DIST}: run packaging/bundle.py linux first")
    return found[-1]


def not_found(path: Path) -> set[str]:
    done = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False)
    return {line.split()[0] for line in done.stdout.splitlines() if "not found" in line}


def missing_libraries(folder: Path) -> dict[str, list[str]]:
    """What the bundle's shared objects cannot find (``ldd``), ``name (needed by file)``, sorted:

    - ``bundle``: missing here but found where the bundle was built from (the site-packages of
      the Python running this): the bundle lost it. The smoke test fails on these.
    - ``system``: missing in the build environment too: a library of the system (Qt's Wayland
      and GTK parts on a machine without them; those go in the .deb's Depends), or one a wheel
      names and never loads (scipy carries such an old libgfortran).
    """
    site = Path(sysconfig.get_paths()["platlib"])
    found: dict[str, list[str]] = {"bundle": [], "system": []}
    for path in sorted(folder.rglob("*.so*")):
        if not path.is_file() or path.is_symlink():
            continue
        missing = not_found(path)
        if not missing:
            continue
        inside = path.relative_to(folder / "_internal") if "_internal" in path.parts else path
        source = site / inside
        expected = not_found(source) if source.is_file() else set()
        for name in sorted(missing):
            kind = "system" if name in expected else "bundle"
            found[kind].append(f"{name} (needed by {inside})")
    return found


def home_env(home: Path, display: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env["BARNRAISE_HOME"] = str(home)
    env.pop("QT_QPA_PLATFORM", None)
    if display:
        env["DISPLAY"] = display
    else:
        env.pop("DISPLAY", None)
    return env


def engine_round_trip(program: Path, home: Path) -> dict[str, object]:
    env = home_env(home)
    started = time.monotonic()
    engine = subprocess.Popen(
        [str(program), "engine", "--headless"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        status = None
        while time.monotonic() - started < 90:
            status = run([str(program), "ctl", "status"], env, timeout=60)
            if status.returncode == 0:
                break
            if engine.poll() is not None:
                raise SmokeFailed(f"the engine exited: {engine.stderr.read()[-800:]}")
            time.sleep(1)
        check(status is not None and status.returncode == 0, "ctl status never answered")
        up = time.monotonic() - started
        stop = run([str(program), "ctl", "shutdown"], env, timeout=60)
        check(stop.returncode == 0, f"ctl shutdown failed: {stop.stderr}")
        engine.wait(timeout=30)
        assert status is not None
        return {
            "engine_answered_s": round(up, 1),
            "engine_exit_code": engine.returncode,
            "ctl_status": status.stdout.strip().splitlines()[:3],
        }
    finally:
        if engine.poll() is None:
            engine.send_signal(signal.SIGTERM)
            engine.wait(timeout=30)


def offline_fetch(program: Path, home: Path) -> dict[str, object]:
    env = home_env(home)
    command = [str(program), "torch", "install", "--json", "--force"]
    started = time.monotonic()
    done = run(
        [*command, "--requirement", "torch==2.13.0", "--index-url", UNREACHABLE], env, timeout=120
    )
    last = json.loads(done.stdout.strip().splitlines()[-1])
    check(done.returncode == 3, f"an unreachable index should exit 3, not {done.returncode}")
    check(last["stage"] == "failed" and last["offline"], f"not reported offline: {last}")
    return {"exit_code": done.returncode, "said": last["text"], "seconds": _since(started)}


def local_fetch(program: Path, home: Path, wheels: Path) -> dict[str, object]:
    env = home_env(home)
    started = time.monotonic()
    done = run(
        [
            str(program),
            "torch",
            "install",
            "--requirement",
            "torch==2.13.0+cpu",
            "--index-url",
            "file:///opt/pypi/simple",
            "--find-links",
            str(wheels),
        ],
        env,
        timeout=900,
    )
    check(done.returncode == 0, f"torch install failed: {done.stdout[-600:]}{done.stderr[-600:]}")
    fetched = _since(started)
    status = run([str(program), "torch", "status"], env, timeout=300)
    check(status.returncode == 0, f"torch status failed: {status.stdout}{status.stderr}")
    check(str(home) in status.stdout, f"torch not from the user's folder: {status.stdout}")
    return {"seconds": fetched, "status": status.stdout.strip().splitlines()}


@contextmanager
def xvfb() -> Iterator[str]:
    display = ":97"
    server = subprocess.Popen(
        ["Xvfb", display, "-screen", "0", SCREEN, "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    desktop: list[subprocess.Popen[bytes]] = []
    try:
        time.sleep(1.5)
        check(server.poll() is None, "Xvfb did not start")
        # a window manager (title bars with the window's icon) and a panel with a system tray,
        # where installed (Debian: openbox, tint2), so the screenshots show both icons
        for program in ("openbox", "tint2"):
            if shutil.which(program):
                desktop.append(
                    subprocess.Popen(
                        [program],
                        env={**os.environ, "DISPLAY": display},
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
                time.sleep(1.5)
        yield display
    finally:
        for process in [*desktop, server]:
            process.terminate()
            process.wait(timeout=10)


def window_shown(display: str, title: str = "Barnraise") -> bool:
    done = subprocess.run(
        ["xwininfo", "-display", display, "-root", "-tree"],
        capture_output=True,
        text=True,
        check=False,
    )
    return f'"{title}' in done.stdout


def app_screenshot(
    command: list[str], home: Path, shot: Path, display: str, settle: float = 8.0
) -> dict[str, object]:
    env = home_env(home, display)
    started = time.monotonic()
    app = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        while not window_shown(display) and time.monotonic() - started < 90:
            if app.poll() is not None:
                raise SmokeFailed(f"the app exited: {app.stdout.read()[-800:]!r}")  # type: ignore[union-attr]
            time.sleep(0.5)
        check(window_shown(display), "no Barnraise window within 90 s")
        shown = _since(started)
        time.sleep(settle)  # the engine starts, the first answers arrive, the dialog says its piece
        subprocess.run(
            ["import", "-display", display, "-window", "root", str(shot)], check=True, timeout=60
        )
        if shutil.which("tint2"):  # the panel's right end, where the tray is, four times larger
            zoom = shot.with_name(shot.stem + "-tray.png")
            crop = ["-gravity", "SouthEast", "-crop", "200x40+0+0", "+repage", "-scale", "400%"]
            subprocess.run(["convert", str(shot), *crop, str(zoom)], check=True, timeout=60)
        titles = [
            line.split('"')[1]
            for line in subprocess.run(
                ["xwininfo", "-display", display, "-root", "-tree"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.splitlines()
            if line.count('"') >= 2 and ("Barnraise" in line or "ready" in line)
        ]
        return {"window_s": shown, "screenshot": str(shot), "windows": sorted(set(titles))}
    finally:
        app.send_signal(signal.SIGTERM)  # the app quits cleanly and stops the engine it started
        try:
            app.wait(timeout=30)
        except subprocess.TimeoutExpired:
            app.kill()
            app.wait()
        subprocess.run(
            [command[0], "ctl", "shutdown"], env=env, capture_output=True, timeout=60, check=False
        )


def deb_round_trip(deb: Path, home: Path, shots: Path, display: str | None) -> dict[str, object]:
    check(os.geteuid() == 0, "installing the .deb needs root (or run with --no-deb)")
    result: dict[str, object] = {}
    install = ["dpkg", "-i", str(deb)]
    if shutil.which("apt-get"):
        # as a volunteer does it: apt resolves the Qt libraries the package depends on
        install = ["apt-get", "install", "-y", "-q", str(deb.resolve())]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    installed = run(install, env, timeout=600)
    check(installed.returncode == 0, f"{' '.join(install[:2])} failed: {installed.stderr}")
    result["installed_with"] = install[0]
    try:
        for path in (
            "/opt/barnraise/barnraise",
            "/usr/share/applications/barnraise.desktop",
            "/usr/share/icons/hicolor/48x48/apps/barnraise.png",
            "/usr/share/icons/hicolor/scalable/apps/barnraise.svg",
        ):
            check(Path(path).is_file(), f"{path} is missing after dpkg -i")
        check(
            os.readlink("/usr/bin/barnraise") == "/opt/barnraise/barnraise",
            "/usr/bin/barnraise is not the link",
        )
        version = run(["/usr/bin/barnraise", "--version"], home_env(home))
        check(version.returncode == 0, "barnraise --version failed")
        result["version"] = version.stdout.strip()
        entry = configparser.ConfigParser(interpolation=None)
        entry.read("/usr/share/applications/barnraise.desktop")
        exec_line = entry["Desktop Entry"]["Exec"].split()
        result["menu_command"] = " ".join(exec_line)
        if display:
            program = shutil.which(exec_line[0]) or exec_line[0]
            result["app"] = app_screenshot(
                [program, *exec_line[1:]], home, shots / "deb-app.png", display
            )
    finally:
        removed = run(["dpkg", "-r", "barnraise"], dict(os.environ), timeout=300)
        result["removed"] = removed.returncode == 0
    left = [
        p
        for p in (
            "/opt/barnraise",
            "/usr/bin/barnraise",
            "/usr/share/applications/barnraise.desktop",
            "/usr/share/icons/hicolor/48x48/apps/barnraise.png",
        )
        if os.path.lexists(p)
    ]
    check(not left, f"left after dpkg -r: {left}")
    purge = run(["dpkg", "-P", "barnraise"], dict(os.environ), timeout=120)
    result["purged"] = purge.returncode == 0
    return result


def _since(started: float) -> float:
    return round(time.monotonic() - started, 1)


def headless_checks(folder: Path, home: Path, *, with_torch: bool) -> dict[str, object]:
    """--version, the libraries, the engine, and torch: the bundle's own, or fetched (offline)."""
    program = folder / "barnraise"
    env = home_env(home)
    report: dict[str, object] = {}
    version = run([str(program), "--version"], env)
    check(version.returncode == 0, f"--version failed: {version.stderr}")
    report["version"] = version.stdout.strip()
    report["missing_libraries"] = missing = missing_libraries(folder)
    check(not missing["bundle"], f"the bundle lost libraries: {missing['bundle'][:5]}")
    xcb = [m for m in missing["system"] if "libqxcb.so" in m or "XcbQpa" in m]
    check(not xcb, f"Qt's X11 plugin cannot load here: {xcb}")
    report["engine"] = engine_round_trip(program, home)
    if with_torch:  # the bundle's own torch, found without fetching anything
        status = run([str(program), "torch", "status"], env, timeout=300)
        check(status.returncode == 0, f"torch status failed: {status.stdout}{status.stderr}")
        check(str(folder) in status.stdout, f"torch not the bundle's: {status.stdout}")
        report["torch_status"] = status.stdout.strip().splitlines()
    else:
        report["offline_fetch"] = offline_fetch(program, home)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shots", type=Path, default=Path("/tmp/barnraise-bundle-shots"))
    parser.add_argument("--with-torch", action="store_true", help="the bundles with torch inside")
    parser.add_argument("--torch-from", type=Path, help="a folder of wheels to fetch torch from")
    parser.add_argument("--no-deb", action="store_true", help="leave the .deb alone")
    args = parser.parse_args(argv)
    tarball = newest("barnraise-*-linux-*.tar.gz", args.with_torch)
    deb = None if args.no_deb else newest("barnraise_*.deb", args.with_torch)
    args.shots.mkdir(parents=True, exist_ok=True)
    report: dict[str, object] = {"tarball": {"name": tarball.name, "bytes": tarball.stat().st_size}}
    if deb is not None:
        report["deb"] = {"name": deb.name, "bytes": deb.stat().st_size}
    shot_prefix = "full-" if args.with_torch else ""
    has_x = shutil.which("Xvfb") is not None and shutil.which("import") is not None
    with tempfile.TemporaryDirectory(prefix="barnraise-smoke-") as scratch:
        work = Path(scratch)
        started = time.monotonic()
        with tarfile.open(tarball) as tar:
            tar.extractall(work / "unpacked", filter="data")
        (folder,) = (work / "unpacked").iterdir()
        program = folder / "barnraise"
        report["unpacked"] = {
            "seconds": _since(started),
            "bytes": sum(p.lstat().st_size for p in folder.rglob("*") if not p.is_dir()),
        }
        report.update(headless_checks(folder, work / "home", with_torch=args.with_torch))
        if has_x:
            with xvfb() as display:
                report["app_first_run"] = app_screenshot(
                    [str(program), "app"],
                    work / "home-app",
                    args.shots / f"{shot_prefix}tarball-app.png",
                    display,
                )
                if args.torch_from and not args.with_torch:
                    report["torch_fetch"] = local_fetch(program, work / "home-app", args.torch_from)
                    report["app_with_torch"] = app_screenshot(
                        [str(program), "app"],
                        work / "home-app",
                        args.shots / "tarball-app-with-torch.png",
                        display,
                    )
                if deb is not None:
                    report["deb_install"] = deb_round_trip(
                        deb, work / "home-deb", args.shots, display
                    )
        else:
            print("Xvfb or ImageMagick's import is missing: no screenshots", file=sys.stderr)
            if deb is not None:
                report["deb_install"] = deb_round_trip(deb, work / "home-deb", args.shots, None)
    (args.shots / f"{shot_prefix}smoke.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SmokeFailed as failure:
        print(f"smoke_linux.py: FAILED: {failure}", file=sys.stderr)
        sys.exit(1)
