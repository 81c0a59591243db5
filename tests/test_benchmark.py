"""The benchmark script runs (quick grid) so it cannot rot; it asserts nothing about time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_estimators.py"


def test_quick_benchmark_prints_one_row_per_size_dtype_and_estimator():
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if "reinforce_plus_plus" in line]
    assert len(rows) == 2 * 2 * 2
    for row in rows:
        error = float(row.split()[-1])
        assert error <= (1e-6 if "float32" in row else 1e-2)
