"""The documentation stays true: package maps list every module, the README's files exist, and the
architecture notes draw the layers that the import contracts enforce."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = sorted(
    init.parent
    for tree in ("core", "app")
    for init in (ROOT / tree).rglob("__init__.py")
    if "__pycache__" not in init.parts
)


def members(package: Path) -> list[str]:
    modules = [p.stem for p in package.glob("*.py") if p.stem != "__init__"]
    subpackages = [p.name for p in package.iterdir() if (p / "__init__.py").is_file()]
    return sorted(modules + subpackages)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_package_map_lists_every_module(package: Path) -> None:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    missing = [m for m in members(package) if not re.search(rf"``{re.escape(m)}/?``", doc)]
    assert not missing, f"{package.relative_to(ROOT)}/__init__.py's map lacks {missing}"


def test_the_readme_names_only_files_that_exist() -> None:
    text = (ROOT / "README.md").read_text()
    named = set(
        re.findall(r"`((?:core|app|tests|benchmarks|packaging|resources|docs)/[^` <>*…]+)`", text)
    )
    named |= set(re.findall(r"(?<![/\w.-])([A-Za-z_]+\.md)\b", text))
    missing = sorted(n for n in named if not (ROOT / n.split(":")[0].rstrip("/")).exists())
    assert not missing, f"the README names files that do not exist: {missing}"


def test_the_architecture_notes_draw_the_enforced_layers() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [
        c["layers"]
        for c in contracts["contracts"]
        if c["type"] == "layers" and "containers" not in c
    ]
    enforced = [
        " | ".join(sorted(part.strip().removeprefix("core.") for part in layer.split("|")))
        for layer in layers
    ]
    notes = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"```text layers\n(.*?)```", notes, re.S)
    assert block, "docs/architecture.md draws the layers in a ```text layers block"
    drawn = [
        " | ".join(sorted(p.strip() for p in line.split("#")[0].strip().split("|")))
        for line in block.group(1).splitlines()
        if line.split("#")[0].strip()
    ]
    assert drawn == enforced
