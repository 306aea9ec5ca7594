"""``barnraise project``: start a new project, or check a project's manifest and its data.

New: ``barnraise project new NAME [--dir DIR] [--mode open|moderated] [--kind collaborative|dmoe]
[--preset demo|albert-large|albert-xxlarge] [--data URL ...] [--data-url URL] [--target-batch N]
[--public-url URL] [--organizer NAME] [--password-stdin] [--description TEXT] [--non-interactive]``
writes the folder DIR (default ./NAME; never over a folder that holds anything): the commented
manifest ``project.toml``, the project key ``project-key.pem``, the coordinator's database with
your moderator account, the DHT node's key, the demo's data in ``data/`` (when used: the coordinator
serves it at ``<public URL>/data/`` and the manifest names it there, unless ``--data-url`` says where
you publish it instead), and ``services/``: systemd units, a Containerfile and compose.yaml for the
organizer's services (coordinator, DHT node, backbone), with a README of the ports to open. The project
is moderated unless ``--mode open``: volunteers sign up and train under an account. On a terminal
it asks for what no flag gave, showing each default; elsewhere (or with ``--non-interactive``) it
takes the defaults. The password comes from a prompt,
``--password-stdin`` (one line) or ``$BARNRAISE_PASSWORD``.

Check: ``barnraise project check MANIFEST [--data-base URL] [--timeout S] [--json]`` validates a
manifest of either kind and its data: every shard URL reachable, the first record readable with
its text field, the tokenizer consistent with the model. One line per check (ok, warning or error,
with the reason); exit status 1 when any is an error.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from core.cli.access import read_password
from core.config.environment import PASSWORD_VARIABLE
from core.config.paths import UserDirs
from core.organize.answers import Answers, Given, settle
from core.organize.folder import PROJECT_FOLDER
from core.organize.new import NewProject, check_password, create_project
from core.organize.presets import KINDS, PRESETS
from core.project.sections import ACCESS_MODES, DATA_FORMATS, DEFAULT_KIND
from core.util.errors import ConfigError
from core.util.files.staged_folder import check_target

PASSWORD_TRIES = 3
DEMO_CACHE = "demo-data"
"""Under the user's cache folder: the demo corpus, made once and copied into each new project."""


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "project",
        help="start a new project (manifest, keys, accounts, services) or check one",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="project_command", metavar="COMMAND", required=True)
    new = sub.add_parser(
        "new",
        help="write a new project's folder: manifest, keys, database, service files",
        description="Write a new project's folder (see barnraise project --help).",
    )
    new.add_argument("name", help="the project's name: 1-64 lowercase letters, digits or '-'")
    new.add_argument("--dir", type=Path, metavar="DIR", help="where to write it (default ./NAME)")
    new.add_argument(
        "--mode",
        choices=ACCESS_MODES,
        help="who may train: anyone (open) or volunteers with an account (default: moderated)",
    )
    new.add_argument("--kind", choices=KINDS, default=DEFAULT_KIND, help="what the project trains")
    presets = sorted({name for (_, name) in PRESETS})
    new.add_argument("--preset", metavar="|".join(presets), help="the model (default: demo)")
    new.add_argument(
        "--data",
        nargs="+",
        metavar="URL",
        help="shard URLs or paths (default for the demo: its shards, written into the folder)",
    )
    new.add_argument(
        "--data-format", choices=DATA_FORMATS, default="auto", help="the shards' format"
    )
    new.add_argument("--text-field", default="text", help="the shards' text column (text)")
    new.add_argument(
        "--data-url",
        metavar="URL",
        help="where you publish the folder's data files (the demo's data/ or relative --data "
        "paths): the manifest names them under this URL (default for the demo's: the "
        "coordinator serves data/ at PUBLIC_URL/data/)",
    )
    new.add_argument("--target-batch", type=int, metavar="N", help="samples per step")
    new.add_argument(
        "--public-url", metavar="URL", help="the coordinator's public URL (http://HOST:8470)"
    )
    new.add_argument("--organizer", metavar="NAME", help="your account (default: your login)")
    new.add_argument(
        "--password-stdin",
        action="store_true",
        help=f"read your account's password from stdin (else ${PASSWORD_VARIABLE}, else a prompt)",
    )
    new.add_argument("--description", metavar="TEXT", help="one line for the project's page")
    new.add_argument(
        "--non-interactive", action="store_true", help="ask nothing: defaults for what is missing"
    )
    new.set_defaults(run=run_new)

    check = sub.add_parser(
        "check",
        help="validate a manifest and its data (reachable, readable, tokenizer consistent)",
        description="Validate a manifest and its data (see barnraise project --help).",
    )
    check.add_argument("manifest", type=Path, help="the project's TOML file")
    check.add_argument(
        "--data-base",
        metavar="URL",
        help="URL or folder the manifest's relative data paths use (default: its folder)",
    )
    check.add_argument(
        "--timeout", type=float, default=10.0, metavar="S", help="seconds per URL (10)"
    )
    check.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    check.set_defaults(run=run_check)


class TerminalAsker:
    """Questions on the terminal: the default in brackets, Enter takes it."""

    def ask(self, prompt: str, default: str) -> str:
        shown = f" [{default}]" if default else ""
        try:
            return input(f"{prompt}{shown} ")
        except EOFError:
            raise ConfigError(
                "the questions were cut short (end of input); nothing was written"
            ) from None

    def tell(self, message: str) -> None:
        print(f"  {message}", file=sys.stderr)


def run_new(args: argparse.Namespace) -> int:
    folder: Path = (args.dir or Path(args.name)).expanduser().absolute()
    check_target(folder, PROJECT_FOLDER)  # before any question: answers are not asked for nothing
    interactive = not args.non_interactive and sys.stdin.isatty()
    given = Given(
        name=args.name,
        kind=args.kind,
        mode=args.mode,
        preset=args.preset,
        data=tuple(args.data) if args.data else None,
        data_format=args.data_format,
        text_field=args.text_field,
        data_url=args.data_url,
        target_batch=args.target_batch,
        public_url=args.public_url,
        organizer=args.organizer,
        description=args.description,
    )
    answers = settle(given, TerminalAsker() if interactive else None)
    password = _password(args.password_stdin, interactive, answers.organizer)
    created = create_project(
        answers,
        password,
        folder,
        demo_cache=UserDirs.default().cache / DEMO_CACHE,
        progress=lambda message: print(message, flush=True),
    )
    del password
    _print_summary(created, answers)
    return 0


def _password(from_stdin: bool, interactive: bool, organizer: str) -> str:
    """The organizer's password: stdin, the environment, or typed twice at a prompt."""
    if from_stdin or PASSWORD_VARIABLE in os.environ:
        password = read_password(from_stdin)
        check_password(password)
        return password
    if not interactive:
        raise ConfigError(
            f"the organizer's account ({organizer}) needs a password: pass --password-stdin "
            f"(one line on standard input) or set {PASSWORD_VARIABLE}; nothing was written"
        )
    for _ in range(PASSWORD_TRIES):
        password = getpass.getpass(f"Password for {organizer} (8 or more characters): ")
        try:
            check_password(password)
        except ConfigError as exc:
            print(f"  {exc}", file=sys.stderr)
            continue
        if getpass.getpass("The same password again: ") == password:
            return password
        print("  the two differ; once more", file=sys.stderr)
    raise ConfigError("no password set; nothing was written")


def _print_summary(created: NewProject, answers: Answers) -> None:
    folder = created.folder
    manifest = created.manifest
    quoted = shlex.quote(str(folder))
    units = " ".join(
        shlex.quote(str(folder / "services" / f"{program.unit}.service"))
        for program in created.programs
    )
    data = ""
    if answers.serves_data:
        data = (
            "\n  data/             the demo's shards and tokenizer: public, the coordinator\n"
            f"                    serves them at {answers.data_base}"
        )
    elif answers.demo_data:
        data = (
            "\n  data/             the demo's shards and tokenizer: publish them at\n"
            f"                    {answers.data_base} (the README says how)"
        )
    print(
        f"Project {manifest.project.name} is ready in {folder}:\n"
        f"  project.toml      the manifest ({manifest.access.mode}; every key with a note)\n"
        f"  project-key.pem   the project key {manifest.access.project_key}: private, keep a copy\n"
        f"  coordinator.db    accounts: {answers.organizer} (moderator)\n"
        + (
            f"  backbone-key.pem  the backbone's key {manifest.access.backbone_keys[0]}: its word "
            "confirms the model's state\n"
            if manifest.access.backbone_keys
            else ""
        )
        + f"  dht-key.pem       the DHT node's key; services/: systemd units, Containerfile,\n"
        f"                    compose.yaml, README.txt (the ports to open){data}\n"
        "\nNext (the README also says how to start them by hand or in containers):\n"
        f"  barnraise project check {shlex.quote(str(folder / 'project.toml'))}\n"
        f"  sudo useradd --system --home-dir {quoted} --shell /usr/sbin/nologin barnraise"
        f" && sudo chown -R barnraise:barnraise {quoted}\n"
        f"  sudo systemctl enable --now {units}\n"
        f"\nThe project URL, for volunteers: {created.project_url}"
    )


def run_check(args: argparse.Namespace) -> int:
    # imported here: the checks read data with core.data, which loads torch; `project new` does not
    from core.organize.check import check_project  # noqa: PLC0415
    from core.organize.findings import failed  # noqa: PLC0415

    if not args.timeout > 0:
        raise ConfigError("--timeout must be a positive number of seconds")
    findings = check_project(args.manifest, data_base=args.data_base, timeout=args.timeout)
    if args.json:
        document = {
            "manifest": str(args.manifest),
            "ok": not failed(findings),
            "checks": [finding.to_json() for finding in findings],
        }
        print(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        for finding in findings:
            print(finding.line())
    return 1 if failed(findings) else 0
