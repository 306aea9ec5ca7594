"""The text of every file ``bundle.py`` writes for the installers, as pure functions.

- ``pyinstaller_spec``  the PyInstaller spec of one target (one folder; torch in it or not)
- ``desktop_entry``     the freedesktop ``.desktop`` entry (the .deb, the tarball)
- ``deb_control``, ``deb_postinst``, ``deb_postrm``   the Debian package's control files
- ``add_to_menu``       the tarball's script that adds the entry and icons to the user's menu
- ``inno_setup``        the Windows installer (Inno Setup 6): Start-menu entry and uninstaller
- ``info_plist``        the macOS ``.app``'s Info.plist

Nothing here touches the disk, so ``tests/packaging`` checks these files on any system.
"""

from __future__ import annotations

import plistlib
from dataclasses import dataclass
from pathlib import Path

APP_NAME = "Barnraise"
COMMAND = "barnraise"
WINDOWED = "barnraisew"
"""Windows only: the same program as a windowed executable (no console), see ``pyinstaller_spec``."""
BUNDLE_ID = "org.barnraise.Barnraise"
SUMMARY = "Lend your idle GPU or CPU to train one deep-learning model together"
DESCRIPTION = (
    "Barnraise is a volunteer computing client, in the spirit of BOINC and Folding@home: it "
    "contributes your computer's idle time to training one deep-learning model with other "
    "volunteers over the internet, and shows your contribution and the project's leaderboard."
)
HOMEPAGE = "https://github.com/barnraise/barnraise"
MAINTAINER = "Barnraise volunteers <barnraise@users.noreply.github.com>"
INNO_APP_ID = "{{6F1C4E0B-2A57-4B9E-9C39-3D7A5E1B2C48}"
"""The installer's identity across versions ({{ is Inno Setup's escaped brace); never change it."""
HICOLOR_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
DEB_DEPENDS = (
    "libc6 (>= 2.28), libglib2.0-0, libfontconfig1, libfreetype6, libdbus-1-3, libegl1, libgl1, "
    "libxkbcommon0, libxkbcommon-x11-0, libx11-xcb1, libxcb1, libxcb-cursor0, libxcb-icccm4, "
    "libxcb-image0, libxcb-keysyms1, libxcb-randr0, libxcb-render-util0, libxcb-shape0, "
    "libxcb-xinerama0, libxcb-xkb1, libwayland-client0, libwayland-cursor0, libwayland-egl1"
)
"""What Qt's X11 and Wayland platform plugins load from the system (the bundle carries Qt)."""


@dataclass(frozen=True)
class SpecInput:
    """What a PyInstaller spec needs to know."""

    target: str  # linux, windows or macos
    root: Path  # the checkout
    entry: Path  # packaging/frozen_entry.py
    icon: Path  # .ico on Windows, .icns on macOS, unused on Linux
    torch: bool  # torch inside the bundle (full) or fetched on first run (light)
    version: str
    info_plist: Path | None = None  # macOS


LIGHT_EXCLUDES = (
    "torch",
    "torchvision",
    "torchaudio",
    "functorch",
    "triton",
    "nvidia",
    "sympy",
    "networkx",
    "mpmath",
)
"""Left out of the light bundle: torch and what only torch imports (fetched on first run)."""
ALWAYS_EXCLUDES = (
    "tkinter",
    "pytest",
    "_pytest",
    "hypothesis",
    "mypy",
    "ruff",
    "importlinter",
    "IPython",
    "matplotlib",
    "PyInstaller",
)
"""Never in a bundle: the development tools of the venv it is built from."""
TRIM = (
    # Arrow Flight RPC, and S3: unused (datasets reach files by HTTP); each pattern also matches
    # the link PyInstaller puts at the top of the folder
    "*arrow_flight*",
    "pyarrow/_flight*",
    "*arrow_python_flight*",
    "*arrow_s3*",
    "pyarrow/_s3fs*",
    # QML, Quick, the virtual keyboard and PDF: pulled in by Qt plugins only
    "*Qt6Qml*",
    "*Qt6Quick*",
    "*Qt6VirtualKeyboard*",
    "*Qt6Pdf*",
    "PySide6/*qtvirtualkeyboardplugin*",
    "PySide6/*/imageformats/*qpdf*",
    # Qt's GTK theme plugin, and the GTK 3 it would carry along from the build machine: a desktop
    # with GTK has its own, and the app draws its own theme
    "PySide6/*/platformthemes/*qgtk3*",
    "libgtk-3.so*",
    "libgdk-3.so*",
    "libatk-1.0.so*",
    "libatk-bridge-2.0.so*",
    "libatspi.so*",
    "libgdk_pixbuf-2.0.so*",
    "libcairo-gobject.so*",
    "libepoxy.so*",
)
"""Files that PyInstaller's hooks collect and Barnraise never loads (patterns on bundle paths);
the smoke test (``packaging/smoke_linux.py``) checks that nothing left misses a library."""
LIGHT_TRIM = ("torch-*.dist-info/*",)
"""The light bundle must not claim, through its metadata, a torch it does not have."""
STDLIB_LEFT_OUT = (
    "tkinter",
    "_tkinter",
    "turtle",
    "turtledemo",
    "idlelib",
    "test",
    "lib2to3",
    "ensurepip",
    "venv",
    "pydoc_data",
    "antigravity",
    "this",
)
"""The light bundle carries the whole standard library, since the torch fetched later imports
parts nothing in the bundle does (``timeit``, ``cProfile``, ``unittest``, ...), but these."""


def pyinstaller_spec(spec: SpecInput) -> str:
    """One folder (``onedir``: starts fast, and pip can add torch beside it) named ``barnraise``.

    Every target gets the console program ``barnraise`` (the command line; on Linux and macOS also
    the app). Windows also gets ``barnraisew.exe``: the same program built windowed, which the Start
    menu opens; the engine and the swarm's peers the app starts run as ``sys.executable``, so
    they are windowed too and never flash a console. macOS wraps the folder in ``Barnraise.app``,
    whose program is built windowed as an app's should be (on macOS that only changes how it is
    packaged: run from a terminal it still prints).
    """
    excludes = [*ALWAYS_EXCLUDES, *(() if spec.torch else LIGHT_EXCLUDES)]
    trim = [*TRIM, *(() if spec.torch else LIGHT_TRIM)]
    windowed = (
        f"""
exe_windowed = EXE(
    pyz, a.scripts, [], exclude_binaries=True, name={WINDOWED!r}, console=False,
    icon={str(spec.icon)!r}, upx=False,
)
executables.append(exe_windowed)"""
        if spec.target == "windows"
        else ""
    )
    bundle = (
        f"""
import plistlib
with open({str(spec.info_plist)!r}, "rb") as plist:
    info = plistlib.load(plist)
app = BUNDLE(coll, name={APP_NAME + ".app"!r}, icon={str(spec.icon)!r},
             bundle_identifier={BUNDLE_ID!r}, version={spec.version!r}, info_plist=info)"""
        if spec.target == "macos"
        else ""
    )
    icon = f"icon={str(spec.icon)!r}, " if spec.target != "linux" else ""
    torch = "inside" if spec.torch else "fetched on first run"
    return f"""# -*- mode: python -*-
# Written by packaging/bundle.py for the {spec.target} target, torch {torch}.
# Do not edit: change packaging/installer_files.py and run bundle.py again.
from fnmatch import fnmatch

from PyInstaller.utils.hooks import collect_data_files, collect_submodules, copy_metadata

ROOT = {str(spec.root)!r}
hidden = collect_submodules("core") + collect_submodules("app") + collect_submodules("pip")
hidden += collect_submodules("keyring.backends") + ["torch_build"]  # packaging/: the picker
hidden += ["pynvml"]  # core/worker/nvml.py imports it by name (NVIDIA GPUs; absent on macOS)
if {not spec.torch!r}:  # a torch fetched later finds every module of the standard library
    import importlib.util
    import sys

    for name in sorted(sys.stdlib_module_names - set({STDLIB_LEFT_OUT!r})):
        if name.startswith("_test") or importlib.util.find_spec(name) is None:
            continue  # another system's module (winreg here), or CPython's own tests
        hidden.append(name)
        if importlib.util.find_spec(name).submodule_search_locations:
            hidden += collect_submodules(name, filter=lambda n: ".test" not in n)
datas = [(ROOT + "/resources", "resources")]
datas += collect_data_files("pip") + copy_metadata("pip")
for name in ("keyring", "datasets", "huggingface_hub", "tokenizers", "aiohttp", "barnraise"):
    try:
        datas += copy_metadata(name)
    except Exception:  # noqa: BLE001 - a package's metadata the bundle can do without
        pass

a = Analysis(
    [{str(spec.entry)!r}],
    pathex=[ROOT, ROOT + "/packaging"],
    datas=datas,
    hiddenimports=hidden,
    excludes={excludes!r},
    noarchive=False,
)
TRIM = {trim!r}


def kept(entries):
    return [e for e in entries if not any(fnmatch(e[0].replace("\\\\", "/"), t) for t in TRIM)]


a.binaries = kept(a.binaries)
a.datas = kept(a.datas)
pyz = PYZ(a.pure)
exe = EXE(
    pyz, a.scripts, [], exclude_binaries=True, name={COMMAND!r}, console={spec.target != "macos"},
    {icon}upx=False,
)
executables = [exe]{windowed}
coll = COLLECT(*executables, a.binaries, a.datas, upx=False, name={COMMAND!r}){bundle}
"""


def desktop_entry(exec_path: str = COMMAND, icon: str = COMMAND) -> str:
    """The menu entry (freedesktop Desktop Entry 1.4); ``exec_path`` must not need quoting."""
    return f"""[Desktop Entry]
Type=Application
Version=1.4
Name={APP_NAME}
GenericName=Volunteer deep-learning client
Comment={SUMMARY}
Exec={exec_path} app
TryExec={exec_path}
Icon={icon}
Terminal=false
Categories=Science;ArtificialIntelligence;
Keywords=volunteer;computing;deep learning;training;GPU;BOINC;
StartupNotify=true
StartupWMClass=barnraise
"""


def deb_control(version: str, architecture: str, installed_kib: int) -> str:
    return f"""Package: {COMMAND}
Version: {version}
Architecture: {architecture}
Maintainer: {MAINTAINER}
Installed-Size: {installed_kib}
Depends: {DEB_DEPENDS}
Section: science
Priority: optional
Homepage: {HOMEPAGE}
Description: {SUMMARY[0].lower() + SUMMARY[1:]}
{_deb_wrap(DESCRIPTION)}
"""


def _deb_wrap(text: str, width: int = 78) -> str:
    """An extended description: lines starting with a space, at most ``width`` long."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width - 1:
            lines.append(" " + line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(" " + line)
    return "\n".join(lines)


_REFRESH_MENUS = """if command -v update-desktop-database >/dev/null 2>&1; then
    update-desktop-database -q /usr/share/applications || true
fi
if command -v gtk-update-icon-cache >/dev/null 2>&1; then
    gtk-update-icon-cache -q -t /usr/share/icons/hicolor || true
fi"""


def deb_postinst() -> str:
    return f"""#!/bin/sh
# Barnraise: show the new menu entry and icons.
set -e
if [ "$1" = configure ]; then
{_indent(_REFRESH_MENUS)}
fi
exit 0
"""


def deb_postrm(prefix: str = "/opt/barnraise") -> str:
    """dpkg removes the package's own files; this removes what appeared beside them.

    Files in ``prefix`` that were not in the package (Python's caches, a torch fetched by an
    older version into the program folder) go with it, and the menus and icon caches forget the
    entry. What each user's Barnraise keeps in their own folders (settings, the ledger, the
    identity key, a torch fetched on first run) stays: dpkg runs as root and does not reach
    into homes; ``barnraise uninstall`` does that for a user.
    """
    return f"""#!/bin/sh
# Barnraise: remove what was added beside the package's files, refresh the menus.
set -e
case "$1" in
    remove|purge)
        rm -rf {prefix}
{_indent(_REFRESH_MENUS, 8)}
        ;;
esac
exit 0
"""


def _indent(text: str, spaces: int = 4) -> str:
    return "\n".join(" " * spaces + line for line in text.splitlines())


def add_to_menu() -> str:
    """The tarball's ``add-to-menu.sh``: the entry and icons into the user's own menus."""
    return f"""#!/bin/sh
# Add Barnraise, unpacked in this folder, to your applications menu (nothing outside your home).
# Run it again after moving the folder; remove-from-menu: rm the two things it names.
set -e
here=$(cd "$(dirname "$0")" && pwd)
data=${{XDG_DATA_HOME:-$HOME/.local/share}}
mkdir -p "$data/applications"
cp -R "$here/share/icons" "$data/"
sed "s|^Exec={COMMAND} |Exec=\\"$here/{COMMAND}\\" |; s|^TryExec=.*|TryExec=$here/{COMMAND}|" \\
    "$here/share/applications/{COMMAND}.desktop" > "$data/applications/{COMMAND}.desktop"
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q "$data/applications" || true
echo "Added $data/applications/{COMMAND}.desktop and icons under $data/icons/hicolor."
"""


def inno_setup(version: str, source: Path, output: Path, icon: Path) -> str:
    """The Windows installer: per user (no administrator), Start-menu entry, uninstaller.

    The uninstaller first asks a running engine to stop (``barnraise ctl shutdown``; Windows
    cannot delete a program that is running), then removes the program folder; the user's own
    folders stay unless ``barnraise uninstall`` was run.
    """
    windowed = f"{{app}}\\{WINDOWED}.exe"
    start_menu = _inno_entry(
        Name=f"{{group}}\\{APP_NAME}", Filename=windowed, Parameters="app", Comment=SUMMARY
    )
    uninstall = _inno_entry(Name=f"{{group}}\\Uninstall {APP_NAME}", Filename="{uninstallexe}")
    desktop = _inno_entry(
        Name=f"{{autodesktop}}\\{APP_NAME}",
        Filename=windowed,
        Parameters="app",
        Tasks="desktopicon",
    )
    launch = _inno_entry(
        Filename=windowed,
        Parameters="app",
        Description=f"{{cm:LaunchProgram,{APP_NAME}}}",
        Flags="nowait postinstall skipifsilent",
    )
    stop_engine = _inno_entry(
        Filename=f"{{app}}\\{COMMAND}.exe",
        Parameters="ctl shutdown",
        Flags="runhidden waituntilterminated",
        RunOnceId="StopEngine",
    )
    return f"""; Written by packaging/bundle.py; build with Inno Setup 6: iscc barnraise.iss
[Setup]
AppId={INNO_APP_ID}
AppName={APP_NAME}
AppVersion={version}
AppPublisher=Barnraise volunteers
AppPublisherURL={HOMEPAGE}
DefaultDirName={{autopf}}\\{APP_NAME}
DefaultGroupName={APP_NAME}
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir={output}
OutputBaseFilename={COMMAND}-{version}-windows-x64-setup
SetupIconFile={icon}
UninstallDisplayIcon={{app}}\\{WINDOWED}.exe
UninstallDisplayName={APP_NAME}
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
CloseApplications=yes

[Tasks]
Name: "desktopicon"; Description: "{{cm:CreateDesktopIcon}}"; Flags: unchecked

[Files]
Source: "{source}\\*"; DestDir: "{{app}}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
{start_menu}
{uninstall}
{desktop}

[Run]
{launch}

[UninstallRun]
{stop_engine}

[UninstallDelete]
Type: filesandordirs; Name: "{{app}}"
"""


def _inno_entry(**parameters: str) -> str:
    """One line of an Inno Setup section: ``Name: "value"; ...`` (quotes doubled inside)."""
    return "; ".join(
        f'{key}: "{value.replace(chr(34), chr(34) * 2)}"' for key, value in parameters.items()
    )


def info_plist(version: str) -> bytes:
    """The ``.app``'s Info.plist; the executable is the ``barnraise`` program, which opens the app
    when Finder starts it without arguments."""
    return plistlib.dumps(
        {
            "CFBundleName": APP_NAME,
            "CFBundleDisplayName": APP_NAME,
            "CFBundleIdentifier": BUNDLE_ID,
            "CFBundleExecutable": COMMAND,
            "CFBundleIconFile": f"{COMMAND}.icns",
            "CFBundlePackageType": "APPL",
            "CFBundleShortVersionString": version,
            "CFBundleVersion": version,
            "CFBundleInfoDictionaryVersion": "6.0",
            "LSMinimumSystemVersion": "11.0",
            "LSApplicationCategoryType": "public.app-category.education",
            "NSHighResolutionCapable": True,
            "NSHumanReadableCopyright": "Apache License 2.0",
        }
    )
