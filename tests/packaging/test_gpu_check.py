"""``dev.py gpu-check``: its dry run on this CPU runs every check's code path and writes one JSON and a
Markdown summary; bad options get a clear error; partial runs combine into one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "packaging"))

import gpu_check  # noqa: E402 - packaging/ is not a package: found through the path above


def dev(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "packaging" / "dev.py"), "gpu-check", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )


def only_result(folder: Path) -> dict[str, Any]:
    [path] = folder.glob("gpu-check-*.json")
    result: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return result


@pytest.mark.slow
@pytest.mark.timeout(960)  # its run's own bound: beside busy loops it outlasted 180 s
def test_the_dry_run_runs_every_check_and_writes_its_results(tmp_path: Path) -> None:
    done = dev("--device", "cpu", "--out", str(tmp_path), timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = only_result(tmp_path)
    assert list(result["checks"]) == list(gpu_check.NAMES)
    assert result["crashed"] == []
    assert result["dry_run"] is True
    assert result["gpu"] is None
    tests = result["checks"]["tests"]["result"]
    assert tests["passed"] == 0
    assert tests["failed"] == []
    assert tests["skipped"] >= 10  # every CUDA test was collected, and skipped without a GPU
    for name in gpu_check.NAMES[1:]:
        assert "goals" in result["checks"][name]["result"], name
    reported = {g["check"] for g in result["goals"]}
    assert reported == set(gpu_check.NAMES)
    assert all(g["met"] is None for g in result["goals"])  # a dry run judges nothing
    trainer = result["checks"]["trainer"]["result"]
    assert {r["path"] for r in trainer["runs"]} == {"plain", "barnraise"}
    assert all(r["samples_per_s"] > 0 for r in trainer["runs"])
    summary = next(tmp_path.glob("gpu-check-*.md")).read_text(encoding="utf-8")
    for name in gpu_check.NAMES:
        assert f"| {name} |" in summary
    log = next(tmp_path.glob("gpu-check-*.log")).read_text(encoding="utf-8")
    for name in gpu_check.NAMES:
        assert f"===== {name}: " in log, name


def test_a_crashing_check_is_recorded_and_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = gpu_check.Check("broken", "a check that crashes", lambda *_: ["-c", "1/0"], 60)
    monkeypatch.setattr(gpu_check, "CHECKS", (broken,))
    monkeypatch.setattr(gpu_check, "NAMES", ("broken",))
    status = gpu_check.main(["--device", "cpu", "--out", str(tmp_path)])
    assert status == 1
    result = only_result(tmp_path)
    assert result["crashed"] == ["broken"]
    entry = result["checks"]["broken"]
    assert entry["error"] == "exited with 1"
    assert "ZeroDivisionError" in entry["output_tail"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--device", "tpu"], "--device must be cuda, cuda:N or cpu"),
        (["--device", "cpu", "--only", "trainer,warp"], "unknown check(s) warp"),
        (["--combine", "/nonexistent/a.json"], "no such file"),
    ],
)
def test_bad_options_get_a_clear_error(args: list[str], said: str) -> None:
    done = dev(*args)
    assert done.returncode == 2
    assert said in done.stderr


def test_asking_for_cuda_without_a_gpu_says_to_use_the_dry_run() -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = dev("--device", "cuda", "--only", "tests", timeout=120)
    assert done.returncode == 2
    assert "sees no CUDA GPU here: run with --device cpu" in done.stderr


def partial(tmp_path: Path, name: str, check: str, gpu: str, met: bool) -> Path:
    result = gpu_check.report(
        {"gpu": gpu, "device": "cuda", "date": "2026-11-24", "dry_run": False, "torch": "2.11"}
        | {"python": "3.12.3", "cuda": "13.0"},
        {check: {"what": check, "command": "x", "seconds": 1.0, "result": {"goals": {
            "g": {"value": 1, "goal": 2, "met": met}}}}},
    )  # fmt: skip
    path = tmp_path / name
    path.write_text(json.dumps(result), encoding="utf-8")
    return path


def test_partial_runs_combine_into_one_and_keep_their_goals(tmp_path: Path) -> None:
    a = partial(tmp_path, "a.json", "trainer", "NVIDIA H100 80GB HBM3", met=True)
    b = partial(tmp_path, "b.json", "memory", "NVIDIA H100 80GB HBM3", met=False)
    out = tmp_path / "out"
    assert gpu_check.main(["--combine", str(a), str(b), "--out", str(out)]) == 0
    result = only_result(out)
    assert list(result["checks"]) == ["trainer", "memory"]
    assert result["missed"] == ["memory.g"]
    assert (out / "gpu-check-nvidia-h100-80gb-hbm3-2026-11-24.md").exists()


def test_results_from_two_gpus_do_not_combine(tmp_path: Path) -> None:
    a = partial(tmp_path, "a.json", "trainer", "NVIDIA H100 80GB HBM3", met=True)
    b = partial(tmp_path, "b.json", "memory", "NVIDIA H200", met=True)
    with pytest.raises(SystemExit, match="measured on another device"):
        gpu_check.main(["--combine", str(a), str(b), "--out", str(tmp_path / "out")])


def test_the_cuda_tests_are_found_without_collecting_the_suite() -> None:
    found = {p.relative_to(ROOT).as_posix() for p in gpu_check.cuda_test_files()}
    assert "tests/gpu/test_cuda_paths.py" in found
    assert "tests/worker/test_precision.py" in found
    assert Path(__file__).relative_to(ROOT).as_posix() not in found


def test_each_benchmark_check_runs_a_module_of_benchmarks_gpu(tmp_path: Path) -> None:
    for check in gpu_check.CHECKS:
        if check.name == "tests":
            continue
        flag, module, *_ = check.argv("cpu", True, tmp_path / f"{check.name}.json")
        assert flag == "-m"
        assert module.startswith("benchmarks.gpu."), module
        assert (ROOT / Path(*module.split("."))).with_suffix(".py").is_file(), module
