"""The project's shape: layout, the README's two commands, CI, and the import contracts."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_layout() -> None:
    for name in ("app", "core", "resources", "tests", "packaging", "benchmarks"):
        assert (ROOT / name).is_dir(), name
    for name in ("pyproject.toml", "README.md", ".ci/run"):
        assert (ROOT / name).is_file(), name
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "barnraise"
    assert project["scripts"]["barnraise"] == "core.cli.main:main"
    assert "torch>=2.13,<2.14" in project["dependencies"]
    assert project["dynamic"] == ["version"]  # core.__version__, the only place it is written


def readme_commands() -> tuple[str, str]:
    text = (ROOT / "README.md").read_text()
    main = re.search(r"^\s*(python3? packaging/dev\.py run)\s*$", text, re.M)
    test = re.search(r"^\s*(python3? packaging/dev\.py test)\s*$", text, re.M)
    assert main, "the README must show the main command on a line of its own"
    assert test, "the README must show the test command on a line of its own"
    return main.group(1), test.group(1)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    _, test_command = readme_commands()
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"exec {test_command}" in ci
    assert (ROOT / ".ci" / "run").stat().st_mode & 0o111


def _names_in(script: str, name: str) -> tuple[str, ...]:
    """The literal tuple ``name`` of a script of packaging/ (read, not imported: they are scripts)."""
    tree = ast.parse((ROOT / "packaging" / script).read_text())
    (value,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    ]
    return tuple(ast.literal_eval(value))


def test_the_test_command_names_tests_that_exist() -> None:
    """The second leg's folders, the tests it leaves out and the side tests: a test moved or renamed
    must be followed there (a ``--deselect`` or ``--ignore`` of a missing path is silent)."""
    named = [
        *_names_in("second_python.py", "TEST_PATHS"),
        *_names_in("second_python.py", "SKIPPED_HERE"),
        *_names_in("dev.py", "SIDE_TESTS"),
    ]

    def found(test: str) -> bool:
        path, _, function = test.partition("::")
        if not (ROOT / path).exists():
            return False
        return not function or f"def {function}(" in (ROOT / path).read_text()

    missing = [test for test in named if not found(test)]
    assert not missing, f"packaging/ names tests that do not exist: {missing}"


def test_the_app_imports_without_torch_or_qt_side_effects() -> None:
    code = "import app, core.api, sys; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def run_contracts(tree: Path) -> subprocess.CompletedProcess[str]:
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports
    return subprocess.run(
        [lint_imports, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": str(Path(sys.executable).parent)},
        capture_output=True,
        text=True,
        check=False,
    )


def contract_modules() -> set[str]:
    """Every module of ours the import contracts name (so the fake tree always has them)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    names: set[str] = set()
    for contract in config["contracts"]:
        for field in ("source_modules", "forbidden_modules", "layers", "ancestors", "containers"):
            for entry in contract.get(field, []):
                names.update(part.strip() for part in entry.split("|"))
        for container in contract.get("containers", []):
            for layer in contract["layers"]:
                names.update(f"{container}.{part.strip()}" for part in layer.split("|"))
    return {n for n in names if n.split(".")[0] in ("core", "app")}


def fake_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A minimal copy of the package layout, so the contracts can be checked on planted imports."""
    base = {"core/__init__.py": "", "app/__init__.py": ""}
    for module in contract_modules():
        base[module.replace(".", "/") + "/__init__.py"] = ""
    for name, body in {**base, **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    return tmp_path


def test_contracts_pass_on_a_clean_tree(tmp_path: Path) -> None:
    tree = fake_tree(
        tmp_path, {"app/ok.py": "import core.api\n", "core/net/x.py": "import core.util\n"}
    )
    result = run_contracts(tree)
    assert result.returncode == 0, result.stdout


def test_contracts_catch_each_kind_of_violation(tmp_path: Path) -> None:
    planted = {
        "core/net/gui.py": "import PySide6\n",
        "app/reach.py": "import core.net\n",
        "core/api/heavy.py": "import torch\n",
        "core/util/up.py": "import core.net\n",
        "core/dht/model.py": "import torch\n",
        "core/net/one.py": "import core.net.two\n",
        "core/net/two.py": "from core.net import one\n",
    }
    result = run_contracts(fake_tree(tmp_path, planted))
    assert result.returncode != 0
    for broken in (
        "core never imports Qt or the app BROKEN",
        "the app reaches the engine only through core.api BROKEN",
        "the GUI never imports torch (fast start), not even through core.api BROKEN",
        "core layers point down BROKEN",
        "the DHT and everything below it never import torch BROKEN",
        "core.net's modules import one another without a cycle BROKEN",
    ):
        assert broken in result.stdout, result.stdout


def test_the_docs_pins_leave_the_python_312_environment_alone(tmp_path: Path) -> None:
    """The 3.12 leg's environment is named by a digest of the dependency lists and rebuilt (gigabytes
    of torch) when it changes: the docs tools, which it never installs, must not move it."""
    sys.path.insert(0, str(ROOT / "packaging"))
    try:
        import second_python
    finally:
        sys.path.remove(str(ROOT / "packaging"))
    real = (ROOT / "packaging" / "constraints.txt").read_text()
    pinned, section, docs = real.partition(second_python.DOCS_SECTION.decode())
    assert section, "constraints.txt keeps the docs extra's pins in a section of their own"
    assert re.search(r"^mkdocs==", docs, re.M)
    assert re.search(r"^mkdocs-material==", docs, re.M)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(r.startswith("mkdocs") for r in extras["optional-dependencies"]["docs"])

    def env_dir(constraints: str) -> Path:
        path = tmp_path / "constraints.txt"
        path.write_text(constraints)
        return second_python.plan(ROOT, ["python3.12"], path, tmp_path / "log").env_dir

    assert env_dir(real) == env_dir(pinned)  # the docs pins weigh nothing
    assert env_dir(real) == env_dir(real.replace("mkdocs==", "mkdocs==0.0.0+"))
    assert env_dir(real) != env_dir(real.replace("aiohttp==", "aiohttp==0.0.0+"))  # the rest does
