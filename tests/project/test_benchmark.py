"""The benchmark script runs (quick grid) so it cannot rot; it asserts nothing about time. The GPU
check (benchmarks/gpu_check.sh) handles its arguments and runs every step on the CPU. The kill
matrix (benchmarks/faults.py, run by hand) answers ``--help`` with its every kill point."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # the scripts run as subprocesses

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_estimators.py"


def test_quick_benchmark_prints_one_row_per_size_dtype_and_estimator():
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if "reinforce_plus_plus" in line]
    assert len(rows) == 2 * 2 * 3  # sizes x dtypes x (REINFORCE++ gamma 1 and 0.99, the baseline)
    assert sum("g=0.99" in row for row in rows) == 4
    for row in rows:
        *_, extra, error = row.split()
        assert error_ok(float(error), row) and float(extra) >= 0.0, row  # no negative peak memory
    sums = [line for line in result.stdout.splitlines() if line.startswith("group sums, ")]
    assert [line.split(",")[1].split()[0] for line in sums] == ["64", "256"]
    assert all("segment/index_add_" in line for line in sums)


def error_ok(error, row):
    return error <= (1e-6 if "float32" in row else 1e-2)


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
    """``--device cpu --quick``: the steps of the GPU check (each test module in its own process,
    one-rank process group, the benchmark) pass on the CPU, the numba kernels included, and the
    summary names each."""
    result = _gpu_check("--device", "cpu", "--quick")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = result.stdout.split("=== summary")[1]
    for step in ("tests/core/test_normalization.py on cpu", "tests/core/test_estimators.py on cpu",
                 "normalization over one gloo rank", "bench_estimators on cpu"):
        assert any(step in line and "PASS" in line for line in summary.splitlines()), summary
    assert "one gloo rank on cpu (numba CPU kernels): max |error|" in result.stdout
    assert "ours: numba" in result.stdout and "g=0.99" in result.stdout


def _interpreter(tmp_path, body):
    """A ``python`` for the check: ``body`` (bash) runs first, then the real interpreter."""
    path = tmp_path / "python"
    path.write_text(f"#!/usr/bin/env bash\n{body}\nexec {sys.executable} \"$@\"\n")
    path.chmod(0o755)
    return str(path)


def _without(tmp_path, *modules):
    """An interpreter whose ``-c`` programs cannot import ``modules`` (ImportError, as when they are
    not installed or fail to load)."""
    blocked = ", ".join(f"{name}=None" for name in modules)
    return _interpreter(tmp_path, f'[ "$1" = -c ] && exec {sys.executable} -c "import sys; '
                                  f'sys.modules.update({blocked}); exec(sys.argv.pop(1))" "${{@:2}}"')


def test_gpu_check_exits_non_zero_when_a_step_fails(tmp_path):
    """An interpreter that passes the requirement check and fails every step: each step is a FAIL
    line, and the exit is 1."""
    fails = _interpreter(tmp_path, 'case "$2" in "# gpu_check requirements"*) ;; *) exit 1 ;; esac')
    result = _gpu_check("--device", "cpu", "--quick", PYTHON=fails)
    assert result.returncode == 1, result.stderr
    summary = result.stdout.split("=== summary")[1]
    assert summary.count("FAIL (exit 1)") == 4, summary


def test_gpu_check_names_a_missing_interpreter_or_requirement(tmp_path):
    """Its real failure, in the check's own words, before any step runs (exit 2): a ``PYTHON`` that
    is no command, and an interpreter without the test extra (pytest-xdist, hypothesis) or with a
    torch that does not import, each named with its error and the install command."""
    absent = _gpu_check("--device", "cpu", PYTHON=str(tmp_path / "nowhere"))
    assert absent.returncode == 2 and "is not a command" in absent.stderr and absent.stdout == ""
    no_extra = _without(tmp_path, "xdist", "hypothesis")
    refused = _gpu_check("--device", "cpu", PYTHON=no_extra)
    assert refused.returncode == 2 and refused.stdout == "", refused
    for words in ("pytest-xdist (test extra", "hypothesis (test extra", 'pip install -e ".[test]"'):
        assert words in refused.stderr, refused.stderr
    refused = _gpu_check("--device", "cuda", PYTHON=_without(tmp_path, "torch"))
    assert refused.returncode == 2 and "cannot import torch: ModuleNotFoundError" in refused.stderr, refused


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_gpu_check_without_a_gpu_says_so():
    result = _gpu_check("--device", "cuda")
    assert result.returncode == 2 and "no CUDA device" in result.stderr and "--device cpu" in result.stderr
    assert f"torch {torch.__version__}" in result.stderr


def test_the_kill_matrix_answers_help_with_every_point():
    """benchmarks/faults.py's ``--help`` exits 0 and offers each point its docstring describes."""
    faults = SCRIPT.parent / "faults.py"
    shown = subprocess.run([sys.executable, str(faults), "--help"], capture_output=True, text=True, timeout=120,
                           cwd=SCRIPT.parents[1])
    assert shown.returncode == 0, shown.stderr[-2000:]
    described = set(re.findall(r"^- ``([\w-]+)``", faults.read_text(), flags=re.M))
    assert len(described) >= 8 and all(point in " ".join(shown.stdout.split()) for point in described), described
