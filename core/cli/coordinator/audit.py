"""``barnraise coordinator audit``: what the coordinator credited, against the backbone's records.

``barnraise coordinator audit --metrics FILE [--metrics FILE ...] [--checks FILE ...]
(--db PATH | --manifest F) [--json]`` reads the backbone's ``metrics.jsonl`` (and its rotated
``.1``, ``.2``), its ``checks.jsonl`` of work checks (beside the metrics unless named) and the
coordinator's database, and prints per volunteer the samples credited and recorded over the epochs
the records cover and the share of them whose work was checked, then every difference with its
reason (``core.coordinator.audit``). Exit status 0 when there is none, 1 when there are
differences, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.coordinator import CoordinatorStore
from core.coordinator.audit import Audit, Checked, audit, checked_by_user, recorded_by_epoch
from core.coordinator.errors import BadRequest
from core.project import AnyManifest, load_any_manifest
from core.util.errors import ConfigError
from core.util.process.logfiles import read_json_lines

CHECKS_FILE = "checks.jsonl"
"""The backbone's log of work checks, beside its ``metrics.jsonl``."""


def register_audit(sub: Any, default_db: Callable[[AnyManifest], Path]) -> None:
    parser = sub.add_parser(
        "audit", help="compare what the coordinator credited with the backbone's records"
    )
    parser.add_argument(
        "--metrics",
        type=Path,
        metavar="FILE",
        action="append",
        required=True,
        help="a backbone's metrics.jsonl (its rotated copies are read too); may be repeated",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--db", type=Path, metavar="PATH", help="the coordinator's database")
    where.add_argument(
        "--manifest", type=Path, metavar="F", help="use the default database of this project"
    )
    parser.add_argument(
        "--checks",
        type=Path,
        metavar="FILE",
        action="append",
        help="a backbone's checks.jsonl (default: the one beside each --metrics file, if any)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    parser.set_defaults(run=lambda args: run_audit(args, default_db))


def run_audit(args: argparse.Namespace, default_db: Callable[[AnyManifest], Path]) -> int:
    try:
        return _run(args, default_db)
    except ConfigError as exc:
        # 2, not the 1 of "differences found": a script must tell a failed audit from a bad call
        print(f"barnraise: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, default_db: Callable[[AnyManifest], Path]) -> int:
    manifest = None if args.manifest is None else load_any_manifest(args.manifest)
    db: Path = args.db if manifest is None else default_db(manifest)
    # with --db alone the project is unknown: a receipt's project is then not checked again
    project = None if manifest is None else manifest.project.name
    if not db.exists():
        raise ConfigError(f"there is no coordinator database at {db}")
    lines: list[dict[str, Any]] = []
    for path in args.metrics:
        if not path.exists():
            raise ConfigError(f"there is no metrics file at {path}")
        lines.extend(read_json_lines(path))
    try:
        recorded = recorded_by_epoch(lines)
    except BadRequest as exc:
        raise ConfigError(f"the metrics are not a backbone's: {exc}") from None
    checked = _checks(args)
    with CoordinatorStore(db) as store:
        found = store.contributions
        epochs = [epoch for epoch, _ in recorded]
        credited = found.by_epoch_and_user(min(epochs), max(epochs)) if epochs else {}
        vouched = store.receipts.credited_by_key()
        result = audit(
            recorded,
            credited,
            found.reported_epochs(),
            store.users(),
            found.sums_by_user(),
            receipts=vouched,
        )
        result.vouching = {
            row["username"]: row["vouching_accounts"] for row in store.receipts.credited_by_user()
        }
        result.checked = checked
        result.failing_receipts = [
            f"{failed['username']}: server {failed['server']}, trainer {failed['trainer']}: "
            f"{failed['reason']}"
            for failed in store.receipts.failing(project)
        ]
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        _print(result)
    return 0 if result.clean else 1


def _checks(args: argparse.Namespace) -> dict[str, Checked]:
    """The work checks of the backbone logs named (or found beside the metrics)."""
    paths: list[Path] = args.checks or [
        m.parent / CHECKS_FILE for m in args.metrics if (m.parent / CHECKS_FILE).exists()
    ]
    lines: list[dict[str, Any]] = []
    for path in paths:
        if not path.exists():
            raise ConfigError(f"there is no checks file at {path}")
        lines.extend(read_json_lines(path))
    try:
        return checked_by_user(lines)
    except BadRequest as exc:
        raise ConfigError(f"the checks are not a backbone's: {exc}") from None


def _print(result: Audit) -> None:
    if result.epochs is None:
        print("the metrics hold no epoch: nothing to compare")
    else:
        first, last = result.epochs
        print(f"epochs {first} to {last} ({result.outside} more at the coordinator, not compared)")
        print(f"  {'volunteer':<24} {'credited':>12} {'recorded':>12} {'checked':>8}")
        for user, (credited, recorded) in sorted(result.users.items()):
            mark = "" if credited == recorded else "  differs"
            share = result.checked_share(user)
            shown = "-" if share is None or not result.checked else f"{share:.0%}"
            print(f"  {user:<24} {credited:>12} {recorded:>12} {shown:>8}{mark}")
    for user, found in sorted(result.checked.items()):
        if found.caught or found.unreached or found.apart:
            print(f"  {user}: {found.caught} check(s) caught faked work, {found.unreached} could "
                  f"not reach its peer, {found.apart} found it computing at other parameters "
                  "than the backbone held")  # fmt: skip
    for difference in result.differences:
        print(difference.text())
    if result.more_differences:
        print(f"... and {result.more_differences} more differences")
    for line in result.inconsistent:
        print(f"the coordinator's own totals disagree: {line}")
    for user, samples in sorted(result.experts.items()):
        vouching = result.vouching.get(user, 0)
        print(f"  {user}: {samples} expert samples, credited by receipts that {vouching} other "
              "account(s) signed")  # fmt: skip
    for line in result.failing_receipts:
        print(f"a stored receipt fails its check: {line}")
    if result.clean:
        print("no difference: the coordinator credited exactly what the records show")
