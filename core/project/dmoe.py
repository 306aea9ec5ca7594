"""The manifest of a ``dmoe`` project: a decentralized mixture-of-experts (Learning@home) whose
experts volunteers host, and whose trainers call them through the DHT.

    [project]  name, kind = "dmoe", description
    [grid]     prefix, shape                 the uids: "ffn.3.17" on a 4x20 grid named ffn
    [expert]   kind, hidden, optimizer, lr, max_batch       what every expert is (ExpertSpec)
    [server]   announcements, batching, checkpoints, experts per volunteer
    [trainer]  k, k_min, beam_size, timeouts, batch size, concurrency, local lr
    [data]     dataset = "digits"
    [network]  initial peers, ports, coordinator (as a collaborative project's)
    [access]   open or moderated (as a collaborative project's)

``load_dmoe_manifest`` reads one (the same file guards as every manifest: ``reading``) and refuses
a file of another kind with a ``ManifestError`` on ``project.kind``. The rules that span sections
(a trainer's batch fits an expert's, ``k`` fits the grid, the queue holds a full batch) are checked
when the manifest is made. See ``resources/dmoe-demo/project.toml`` for a commented example.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from core.project.dmoe_sections import (
    DmoeDataSection,
    ExpertSection,
    GridSection,
    ServerSection,
    TrainerSection,
)
from core.project.errors import ManifestError
from core.project.reading import (
    declared_kind,
    read_document,
    read_manifest_text,
    section,
    table,
)
from core.project.sections import AccessSection, NetworkSection, ProjectSection
from core.project.validation import check_keys

DMOE = "dmoe"
_SECTIONS = ("project", "grid", "expert", "server", "trainer", "data", "network", "access")


@dataclass(frozen=True)
class DmoeManifest:
    KIND: ClassVar[str] = DMOE
    project: ProjectSection
    grid: GridSection
    expert: ExpertSection = dataclasses.field(default_factory=ExpertSection)
    server: ServerSection = dataclasses.field(default_factory=ServerSection)
    trainer: TrainerSection = dataclasses.field(default_factory=TrainerSection)
    data: DmoeDataSection = dataclasses.field(default_factory=DmoeDataSection)
    network: NetworkSection = dataclasses.field(default_factory=NetworkSection)
    access: AccessSection = dataclasses.field(default_factory=AccessSection)
    path: Path | None = None
    """The file it was loaded from."""

    def __post_init__(self) -> None:
        # the rules that span sections; each section checked its own on creation
        if self.project.kind != DMOE:
            reason = (
                f"must be {DMOE!r} for a mixture-of-experts manifest, got {self.project.kind!r}"
            )
            self._fail("project.kind", reason)
        size = self.grid.size
        for key, value in (
            ("trainer.k", self.trainer.k),
            ("server.experts_per_server", self.server.experts_per_server),
        ):
            if value > size:
                self._fail(key, f"must be at most the grid's {size} experts, got {value}")
        if self.server.max_queue < self.expert.max_batch:
            self._fail(
                "server.max_queue",
                f"must be at least expert.max_batch ({self.expert.max_batch}), "
                f"got {self.server.max_queue}",
            )
        if self.trainer.batch_size > self.expert.max_batch:
            self._fail(
                "trainer.batch_size",
                f"must be at most expert.max_batch ({self.expert.max_batch}), "
                f"got {self.trainer.batch_size}",
            )
        if self.access.moderated and not self.network.coordinator_url:
            self._fail("network.coordinator_url", "a moderated project needs its coordinator")

    def _fail(self, key: str, reason: str) -> None:
        raise ManifestError(self.path, key, reason)

    def with_network(self, **changes: Any) -> DmoeManifest:
        """A copy with some ``[network]`` values changed, re-validated."""
        return self._with_section("network", changes)

    def with_server(self, **changes: Any) -> DmoeManifest:
        """A copy with some ``[server]`` values changed (e.g. from the command line), re-validated."""
        return self._with_section("server", changes)

    def _with_section(self, name: str, changes: Mapping[str, Any]) -> DmoeManifest:
        current = getattr(self, name)
        try:
            check_keys(changes, [f.name for f in dataclasses.fields(current)], name)
            return dataclasses.replace(self, **{name: dataclasses.replace(current, **changes)})
        except ManifestError as error:
            raise error.at(self.path) from None


def load_dmoe_manifest(path: Path) -> DmoeManifest:
    """Read and validate the ``dmoe`` manifest at ``path``; another kind is a ``ManifestError``."""
    path = path.expanduser().absolute()
    return parse_dmoe_manifest(read_manifest_text(path), path=path)


def parse_dmoe_manifest(text: str, *, path: Path | None = None) -> DmoeManifest:
    """Validate ``dmoe`` manifest ``text``; ``path`` names it in errors."""
    return build_dmoe_manifest(read_document(text, path), path)


def build_dmoe_manifest(document: Mapping[str, Any], path: Path | None) -> DmoeManifest:
    """The ``dmoe`` manifest in a TOML ``document`` already read."""
    kind = declared_kind(document)
    project = document.get("project")
    said = project.get("kind") if isinstance(project, dict) else None
    if kind != DMOE and (said is None or kind == said):  # an unknown kind: ProjectSection says so
        reason = f"this is a {kind!r} project; a mixture-of-experts manifest says kind = {DMOE!r}"
        raise ManifestError(path, "project.kind", reason)
    try:
        check_keys(document, _SECTIONS, "", what="section")
        # sections in file order, so that the first mistake reported is the first one in the file
        return DmoeManifest(
            project=section(ProjectSection, table(document, "project")),
            grid=section(GridSection, table(document, "grid")),
            expert=section(ExpertSection, table(document, "expert")),
            server=section(ServerSection, table(document, "server")),
            trainer=section(TrainerSection, table(document, "trainer")),
            data=section(DmoeDataSection, table(document, "data")),
            network=section(NetworkSection, table(document, "network")),
            access=section(AccessSection, table(document, "access")),
            path=path,
        )
    except ManifestError as error:
        raise error.at(path) from None
