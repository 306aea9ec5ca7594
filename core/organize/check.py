"""``check_project``: is a manifest, of either kind, ready for volunteers? One finding per check.

In order: the manifest loads (a ``ManifestError`` is the one finding then, as it reads); its
initial peers are addresses a peer can dial; then what its kind trains on. A collaborative
project's shards are tried (``check_data``: every URL reachable, the first record readable, with the
text field) and its tokenizer loaded and measured against the model (``check_tokenizer``). A dmoe
project's trainers learn the bundled digits, which are read as they read them.

Nothing is written, and no peer or coordinator is started: this runs before any of them.
"""

from __future__ import annotations

from pathlib import Path

from core.moe.client.digits import DigitsDataError, load_digits
from core.net.errors import AddressError
from core.net.host.address import PeerAddress
from core.organize.check_data import first_example, reach_all, reach_findings
from core.organize.check_tokenizer import check_tokenizer
from core.organize.findings import ERROR, OK, Finding
from core.project import AnyManifest, DmoeManifest, Manifest, ManifestError, load_any_manifest

DEFAULT_TIMEOUT = 10.0
"""Seconds each URL may take to answer."""


def check_project(
    path: Path, *, data_base: str | None = None, timeout: float = DEFAULT_TIMEOUT
) -> list[Finding]:
    """Every check of the manifest at ``path``, in order; relative data paths resolve against
    ``data_base`` (a URL or folder, as a peer's ``--data-base``) or else the manifest's folder."""
    try:
        manifest = load_any_manifest(path)
    except ManifestError as exc:
        return [Finding(ERROR, "manifest", str(exc))]
    findings = [Finding(OK, "manifest", _summary(manifest))]
    findings += _peers(manifest)
    if isinstance(manifest, Manifest):
        findings += _collaborative_data(manifest, data_base, timeout)
    else:
        findings.append(_digits(manifest))
    return findings


def _summary(manifest: AnyManifest) -> str:
    where = f"{manifest.path}: " if manifest.path is not None else ""
    kind = "dmoe" if isinstance(manifest, DmoeManifest) else "collaborative"
    coordinator = manifest.network.coordinator_url or "no coordinator"
    return f"{where}{kind} project {manifest.project.name}, {manifest.access.mode}, {coordinator}"


def _peers(manifest: AnyManifest) -> list[Finding]:
    peers = manifest.network.initial_peers
    findings = []
    for i, text in enumerate(peers):
        try:
            address = PeerAddress.parse(text)
        except AddressError as exc:
            findings.append(Finding(ERROR, f"network.initial_peers[{i}]", f"{text!r}: {exc}"))
            continue
        if address.peer_id is None:
            findings.append(
                Finding(
                    ERROR,
                    f"network.initial_peers[{i}]",
                    f"{text!r} names no peer: add /p2p/<PeerID> (peers refuse to dial it)",
                )
            )
    if not findings:
        said = (
            f"{len(peers)} address(es) peers can dial"
            if peers
            else "none: the first peer starts the swarm, and others need its address"
        )
        findings.append(Finding(OK, "network.initial_peers", said))
    return findings


def _collaborative_data(manifest: Manifest, data_base: str | None, timeout: float) -> list[Finding]:
    reaches = reach_all(manifest, data_base, timeout)
    findings = reach_findings(manifest, reaches)
    findings.append(first_example(manifest, reaches, data_base, timeout))
    findings.append(check_tokenizer(manifest, data_base, timeout))
    return findings


def _digits(manifest: DmoeManifest) -> Finding:
    what = "data.dataset"
    try:
        digits = load_digits()
    except DigitsDataError as exc:
        return Finding(ERROR, what, str(exc))
    return Finding(
        OK,
        what,
        f"{manifest.data.dataset}: {len(digits.train_x):,} training and {len(digits.test_x):,} "
        "test images read, as trainers read them",
    )
