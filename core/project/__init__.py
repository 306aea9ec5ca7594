"""The project manifest: what a swarm trains, on which data, and how (a TOML file).

A manifest declares its kind (``[project] kind``): ``collaborative`` (DeDLOC training of one
ALBERT model, the default) or ``dmoe`` (a decentralized mixture-of-experts whose experts
volunteers host).

- ``manifest``    ``Manifest`` (collaborative), ``load_manifest`` and ``parse_manifest``: cross-section
  checks, resolving data URLs, re-validated overrides (``with_training``, ``with_averaging``); a
  file of another kind is a ``ManifestError`` on ``project.kind``.
- ``dmoe``        ``DmoeManifest``, ``load_dmoe_manifest`` and ``parse_dmoe_manifest``: grid, experts,
  servers, trainers, data; the rules across them.
- ``kinds``       ``load_any_manifest``: whichever kind the file declares (the engine's reader);
  ``AnyManifest``.
- ``reading``     reading a file into a TOML document (a regular file of at most 1 MiB, nested at
  most 16 levels), the declared kind, and building a section from its table.
- ``sections``    one frozen dataclass per TOML section (``[project]``, ``[model]``, ``[data]`` with its
  ``[[data.sources]]``, ``[training]``, ``[averaging]``, ``[network]``, ``[access]``), each validating itself;
  every number and list has an upper bound (the ``MAX_*`` constants, each field's docstring).
- ``evaluation``  ``EvaluationSection``: ``[evaluation]``, the held-out text the backbone measures
  the model on, how much of it and how often.
- ``dmoe_sections`` the same for a dmoe manifest's ``[grid]``, ``[expert]``, ``[server]``,
  ``[trainer]`` and ``[data]``.
- ``validation``  the shared checks: TOML types from the annotations, ranges, choices, unknown keys.
- ``prescan``     the text's deepest brackets and longest dotted key, measured before ``tomllib``
  reads it (deep or long ones cost it recursion, time and memory).
- ``errors``      ``ManifestError``: the file, the dotted key and the reason.
- ``compatibility`` ``refusal``: the change between two versions of a manifest that would break
  training (the model, the tokenizer, a dmoe grid...), which neither the coordinator serves nor an
  engine takes.
- ``signed``      ``SignedManifest``: the manifest as a coordinator serves it (``GET /manifest``),
  versioned and signed by the project key; building (``sign_manifest``), reading
  (``parse_envelope``) and checking it (``SignedManifestError`` says what is wrong).

This package imports neither torch nor the training code: model settings are plain values here.
"""

from core.project.dmoe import DmoeManifest, load_dmoe_manifest, parse_dmoe_manifest
from core.project.dmoe_sections import (
    DmoeDataSection,
    ExpertSection,
    GridSection,
    ServerSection,
    TrainerSection,
)
from core.project.errors import ManifestError
from core.project.kinds import AnyManifest, load_any_manifest, parse_any_manifest
from core.project.manifest import Manifest, load_manifest, parse_manifest
from core.project.sections import (
    AccessSection,
    AveragingSection,
    DataSection,
    ModelSection,
    NetworkSection,
    ProjectSection,
    SourceSection,
    TrainingSection,
)

__all__ = [
    "AccessSection",
    "AnyManifest",
    "AveragingSection",
    "DataSection",
    "DmoeDataSection",
    "DmoeManifest",
    "ExpertSection",
    "GridSection",
    "Manifest",
    "ManifestError",
    "ModelSection",
    "NetworkSection",
    "ProjectSection",
    "ServerSection",
    "SourceSection",
    "TrainerSection",
    "TrainingSection",
    "load_any_manifest",
    "load_dmoe_manifest",
    "load_manifest",
    "parse_any_manifest",
    "parse_dmoe_manifest",
    "parse_manifest",
]
