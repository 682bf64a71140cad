"""bench/gpu_wheels.py and bench/gpu_smoke.sh: what the GPU smoke run carries is complete, and its script runs."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement

from tests.bench_scripts import load_bench

ROOT = Path(__file__).resolve().parents[1]
gpu_wheels = load_bench("gpu_wheels")


def test_every_requirement_of_a_carried_wheel_is_carried_held_by_the_device_or_left_out_on_purpose():
    needed = gpu_wheels.closure(gpu_wheels.ROOTS)
    carried = gpu_wheels.carried(needed)
    assert {"transformers", "papermill", "ipykernel", "datasets", "jupytext"} <= set(carried)
    assert not {"torch", "numpy", "pandas"} & set(carried)  # the image's own
    accounted = set(carried) | gpu_wheels.DEVICE_HAS | gpu_wheels.SKIPPED | gpu_wheels.NEVER
    env = {**gpu_wheels.DEVICE_PYTHON, "extra": ""}
    for name in carried:
        for text in metadata.distribution(name).requires or ():
            req = Requirement(text)
            if req.marker is None or Marker(str(req.marker)).evaluate(env):
                assert gpu_wheels.canonical(req.name) in accounted, f"{name} needs {req.name}, which nothing provides"


def test_pinned_versions_are_this_environments():
    carried = gpu_wheels.carried(gpu_wheels.closure(gpu_wheels.ROOTS))
    for name in gpu_wheels.PINNED:
        assert carried[name] == metadata.version(name)


def test_smoke_script_checks_the_environment_and_reports_a_chapter_over_budget(tmp_path):
    """With no time left, the script checks imports, writes its report header and marks the chapter not started
    (running a chapter is left to the device run and to tests of the book runner)."""
    env = {**os.environ, "PYTHON": sys.executable, "MODEL": "random:tiny-llama", "DEVICE": "cpu", "CHAPTERS": "05",
           "BUDGET_S": "-1", "OUT": str(tmp_path / "out"), "WHEELS": str(tmp_path / "no-wheels")}
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_smoke.sh")], env=env, capture_output=True, text=True, check=False,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "transformers " in (tmp_path / "out" / "environment.txt").read_text()
    report = (tmp_path / "out" / "gpu_smoke.md").read_text()
    assert "model random:tiny-llama, profile smoke, device cpu" in report
    assert "| 05 | not started: over the -1 s budget |" in report
    assert "two-device map: not started: over the -1 s budget" in report
