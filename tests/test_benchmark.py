"""The benchmark script runs (quick grid) so it cannot rot; it asserts nothing about time. The GPU
check (benchmarks/gpu_check.sh) handles its arguments and runs every step on the CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # the scripts run as subprocesses

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_estimators.py"


def test_quick_benchmark_prints_one_row_per_size_dtype_and_estimator():
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if "reinforce_plus_plus" in line]
    assert len(rows) == 2 * 2 * 2
    for row in rows:
        error = float(row.split()[-1])
        assert error <= (1e-6 if "float32" in row else 1e-2)


GPU_CHECK = SCRIPT.with_name("gpu_check.sh")


def _gpu_check(*args, **env):
    import os

    return subprocess.run(["bash", str(GPU_CHECK), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env})


def test_gpu_check_help_and_usage_errors():
    """``--help`` exits 0 naming every option; a bad argument exits 2 in one line, running nothing."""
    shown = _gpu_check("--help")
    assert shown.returncode == 0 and all(word in shown.stdout for word in ("--device cuda", "--device cpu", "--quick"))
    for args, words in ((["--device", "tpu"], "use cuda or cpu"), (["--bogus"], "unknown argument '--bogus'"),
                        (["--device"], "needs a value")):
        refused = _gpu_check(*args)
        assert refused.returncode == 2 and words in refused.stderr and refused.stdout == "", (args, refused)


def test_gpu_check_dry_run_on_the_cpu_runs_every_step():
    """``--device cpu --quick``: the three steps of the GPU check (tests on the device, one-rank
    process group, the benchmark) pass on the CPU and the summary names each."""
    result = _gpu_check("--device", "cpu", "--quick")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = result.stdout.split("=== summary")[1]
    for step in ("numerical tests on cpu", "normalization over one gloo rank", "bench_estimators on cpu"):
        assert any(step in line and "PASS" in line for line in summary.splitlines()), summary
    assert "one gloo rank on cpu: max |error|" in result.stdout


def test_gpu_check_exits_non_zero_when_a_step_fails():
    """Every step fails (its interpreter is ``false``): each is a FAIL line and the exit is 1."""
    result = _gpu_check("--device", "cpu", "--quick", PYTHON="false")
    assert result.returncode == 1
    summary = result.stdout.split("=== summary")[1]
    assert summary.count("FAIL (exit 1)") == 3, summary


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_gpu_check_without_a_gpu_says_so():
    result = _gpu_check("--device", "cuda")
    assert result.returncode == 2 and "no CUDA device" in result.stderr and "--device cpu" in result.stderr
