"""The project manifest: what a swarm trains, on which data, and how (a TOML file).

- ``manifest``    ``Manifest``, ``load_manifest`` and ``parse_manifest``: reading (a regular file of at
  most 1 MiB, nested at most 16 levels), cross-section checks,
  resolving data URLs, and re-validated overrides (``with_training``, ``with_averaging``).
- ``sections``    one frozen dataclass per TOML section (``[project]``, ``[model]``, ``[data]`` with its
  ``[[data.sources]]``, ``[training]``, ``[averaging]``, ``[network]``, ``[access]``), each validating itself;
  every number and list has an upper bound (the ``MAX_*`` constants, each field's docstring).
- ``validation``  the shared checks: TOML types from the annotations, ranges, choices, unknown keys.
- ``prescan``     the text's deepest brackets and longest dotted key, measured before ``tomllib``
  reads it (deep or long ones cost it recursion, time and memory).
- ``errors``      ``ManifestError``: the file, the dotted key and the reason.

This package imports neither torch nor the training code: model settings are plain values here.
"""

from core.project.errors import ManifestError
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
    "AveragingSection",
    "DataSection",
    "Manifest",
    "ManifestError",
    "ModelSection",
    "NetworkSection",
    "ProjectSection",
    "SourceSection",
    "TrainingSection",
    "load_manifest",
    "parse_manifest",
]
