"""The models a new project may start from: the shipped manifests in ``resources/``.

A preset is a whole manifest (model, data layout, training, averaging) that ``barnraise project new``
copies and then changes where the organizer answered (name, access, data, target batch, the
coordinator's URL). ``demo`` is the model ``barnraise swarm`` trains, small enough for laptops;
``albert-large`` is sahajBERT's shape and ``albert-xxlarge`` ALBERT-xxlarge's, for volunteers' GPUs;
``llama-demo`` is a small causal language model of the Llama family's shape on the demo's data, and
``llama-1b`` that shape at a billion parameters; a ``dmoe`` project starts from the
mixture-of-experts demo.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.project import AnyManifest, DmoeManifest, Manifest, load_any_manifest
from core.project.dmoe import DMOE
from core.project.sections import DEFAULT_KIND
from core.util.errors import ConfigError
from core.util.process.resources import resource_path

KINDS = (DEFAULT_KIND, DMOE)
DEMO = "demo"


@dataclass(frozen=True)
class Preset:
    name: str
    kind: str
    resource: str
    """The manifest among the data files (``resource_path``)."""
    summary: str
    """One line for the question that offers it."""
    uses_demo_data: bool = False
    """Whether its default data is the demo corpus (written into the new project's folder). Such
    a preset names the demo's shards and tokenizer as ``resources/demo/project.toml`` does, and
    its vocabulary is the demo tokenizer's."""

    @property
    def path(self) -> Path:
        return resource_path(self.resource)

    def load(self) -> AnyManifest:
        manifest = load_any_manifest(self.path)
        wanted = DmoeManifest if self.kind == DMOE else Manifest
        if not isinstance(manifest, wanted):  # a broken installation, not the organizer's doing
            raise ConfigError(
                f"the {self.name} preset at {self.path} is not a {self.kind} manifest"
            )
        return manifest


PRESETS: dict[tuple[str, str], Preset] = {
    (DEFAULT_KIND, DEMO): Preset(
        DEMO,
        DEFAULT_KIND,
        "demo/project.toml",
        "the demo's small ALBERT (1.7 MB; a few laptops train it), on the demo's text",
        uses_demo_data=True,
    ),
    (DEFAULT_KIND, "llama-demo"): Preset(
        "llama-demo",
        DEFAULT_KIND,
        "llama-demo/project.toml",
        "a small Llama-shaped causal LM (5 MB; laptops train it), on the demo's text",
        uses_demo_data=True,
    ),
    (DEFAULT_KIND, "albert-large"): Preset(
        "albert-large",
        DEFAULT_KIND,
        "albert-large/project.toml",
        "sahajBERT's ALBERT-large (17M parameters, GPUs of 8 GB), on your data",
    ),
    (DEFAULT_KIND, "albert-xxlarge"): Preset(
        "albert-xxlarge",
        DEFAULT_KIND,
        "albert-xxlarge/project.toml",
        "ALBERT-xxlarge (206M parameters, 8 GB GPUs with 8-bit offloaded states), on your data",
    ),
    (DEFAULT_KIND, "llama-1b"): Preset(
        "llama-1b",
        DEFAULT_KIND,
        "llama-1b/project.toml",
        "a Llama-shaped causal LM (1.04B parameters, 16 GB GPUs, 8-bit offloaded states), "
        "on your data",
    ),
    (DMOE, DEMO): Preset(
        DEMO,
        DMOE,
        "dmoe-demo/project.toml",
        "the mixture-of-experts demo: 16 experts learning the 8x8 digits",
    ),
}


def preset_names(kind: str) -> list[str]:
    """The presets a project of ``kind`` may start from, the default first."""
    return [name for (k, name) in PRESETS if k == kind]


def find_preset(kind: str, name: str) -> Preset:
    """The preset ``name`` for a project of ``kind``; ``ConfigError`` naming the choices."""
    if kind not in KINDS:
        raise ConfigError(f"unknown project kind {kind!r}; choose {' or '.join(KINDS)}")
    preset = PRESETS.get((kind, name))
    if preset is None:
        choices = ", ".join(preset_names(kind))
        raise ConfigError(f"a {kind} project has no preset {name!r}; choose one of: {choices}")
    return preset
