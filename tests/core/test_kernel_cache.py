"""The CPU kernels survive numba's disk cache: no writable location, truncated or garbage cache
files. Each case runs in a fresh process with its own ``NUMBA_CACHE_DIR``; the cases that need a
written cache start from a copy of one compiled by the module's first cold run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every case runs fresh processes
# Both estimators, bool and int64 masks, gamma 1 and 0.5; the values are exact by hand:
# G = [3, 2] -> A = [1, -1]; gamma 0.5: G = [1 + 0.5 * 4, 4] = [3, 4] -> A = [-1, 1];
# baseline: R = [1, 3] in one group -> C = [-1, 1] -> A = C (mean 0, variance 1).
SCRIPT = textwrap.dedent("""
    import json, logging, sys
    import numpy as np, torch

    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append((record.levelname, record.getMessage()))
    logging.getLogger("verl_rfpp").addHandler(handler)

    from verl_rfpp.core import passes
    from verl_rfpp import reinforce_plus_plus, reinforce_plus_plus_baseline

    mask = torch.tensor([[1, 1, 0]])
    pair = np.array(["a", "a"], dtype=object)
    two = torch.tensor([[0.0, 1.0, 9.0], [0.0, 3.0, 9.0]])
    results = [
        reinforce_plus_plus(torch.tensor([[1.0, 2.0, 9.0]]), mask),
        reinforce_plus_plus(torch.tensor([[1.0, 4.0, 9.0]]), mask.bool(), {"gamma": 0.5}),
        reinforce_plus_plus_baseline(two, mask.repeat(2, 1), pair),
        reinforce_plus_plus_baseline(two, mask.bool().repeat(2, 1), pair),
    ]
    from verl_rfpp.core import kernels

    compiled = {name: len(getattr(kernels, name).signatures)
                for name in ("row_sums_of_selected", "suffix_sums", "centered_row_sums", "normalize",
                             "broadcast_row_values")}
    print(json.dumps({
        "values": [[r.returns.tolist(), r.advantages.tolist()] for r in results],
        "kernels_used": passes.uses_cpu_kernels(mask),
        "compiled": compiled,
        "records": records,
    }))
""")
EXPECTED = [
    [[[3.0, 2.0, 0.0]], [[1.0, -1.0, 0.0]]],
    [[[3.0, 4.0, 0.0]], [[-1.0, 1.0, 0.0]]],
    [[[-1.0, -1.0, 0.0], [1.0, 1.0, 0.0]], [[-1.0, -1.0, 0.0], [1.0, 1.0, 0.0]]],
    [[[-1.0, -1.0, 0.0], [1.0, 1.0, 0.0]], [[-1.0, -1.0, 0.0], [1.0, 1.0, 0.0]]],
]


def _run(cache_dir, **env):
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), "VERL_RFPP_CPU_KERNELS": "1", **env}
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600,
                            env=environment)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["values"] == EXPECTED  # the same kernels, the same exact values
    assert report["kernels_used"] and all(report["compiled"].values())  # numba ran, not torch
    return [message for level, message in report["records"] if level == "WARNING"]


@pytest.fixture(scope="module")
def compiled_cache(tmp_path_factory) -> Path:
    """A cache written by a cold run (it compiles, no warning) and read by a warm one (no warning)."""
    cache_dir = tmp_path_factory.mktemp("compiled") / "numba-cache"
    assert _run(cache_dir) == []  # cold: compiles and writes the cache
    assert _run(cache_dir) == []  # warm
    return cache_dir


def _copy_of(cache_dir: Path, destination: Path) -> Path:
    return Path(shutil.copytree(cache_dir, destination))


def _cache_files(cache_dir: Path, suffix: str):
    files = sorted(cache_dir.rglob(f"*{suffix}"))
    assert files, f"no {suffix} files under {cache_dir}"
    return files


def _no_locator_env(tmp_path):
    """Only the NUMBA_CACHE_DIR locator, at a path whose parent is a regular file: as root too,
    numba finds no writable cache location ("no locator available")."""
    (tmp_path / "a-file").write_text("")
    return tmp_path / "a-file" / "cache", {"NUMBA_CACHE_LOCATOR_CLASSES": "UserProvidedCacheLocator"}


def test_no_writable_cache_location_compiles_in_memory_with_one_warning(tmp_path):
    cache_dir, env = _no_locator_env(tmp_path)
    warnings = _run(cache_dir, **env)
    assert len(warnings) == 1, warnings
    assert "no locator available" in warnings[0] and "NUMBA_CACHE_DIR" in warnings[0]


def test_an_unwritable_numba_cache_dir_is_reported_with_where_numba_really_caches(tmp_path, compiled_cache):
    """numba skips a NUMBA_CACHE_DIR it cannot create and writes to the next location (here the
    user-wide cache under XDG_CACHE_HOME) without a word: one WARNING naming both, then nothing."""
    (tmp_path / "a-file").write_text("")
    env = {"NUMBA_CACHE_LOCATOR_CLASSES": "UserProvidedCacheLocator,UserWideCacheLocator",
           "XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}
    warnings = _run(tmp_path / "a-file" / "cache", **env)
    assert len(warnings) == 1, warnings
    assert "NUMBA_CACHE_DIR is not a writable directory" in warnings[0]
    assert f"numba caches them in {tmp_path / 'xdg'}" in warnings[0]
    assert any((tmp_path / "xdg").rglob("*.nbi"))
    assert _run(_copy_of(compiled_cache, tmp_path / "usable"), **env) == []


@pytest.mark.parametrize("damage", ["truncated-index", "garbage-index", "truncated-data", "garbage-data"])
def test_unreadable_cache_files_compile_in_memory_with_one_warning_then_repair(tmp_path, compiled_cache, damage):
    """Cache files a kill cut short (``truncated-*``) or another program overwrote."""
    cache_dir = _copy_of(compiled_cache, tmp_path / "numba-cache")
    for path in _cache_files(cache_dir, ".nbc" if damage.endswith("-data") else ".nbi"):
        if damage.startswith("truncated-"):
            path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
        else:
            path.write_bytes(b"not a pickle at all\n" * 3)
    warnings = _run(cache_dir)
    assert len(warnings) == 1, warnings
    assert "cache file" in warnings[0] and "NUMBA_CACHE_DIR" in warnings[0]
    assert _run(cache_dir) == []  # the process that found them wrote a fresh cache


def test_doctor_reports_an_unusable_cache_as_a_fail_line_with_the_fix(tmp_path):
    cache_dir, env = _no_locator_env(tmp_path)
    result = subprocess.run(["verl-rfpp", "doctor"], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), **env})
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any(line.startswith("ok    CPU kernels (numba") and "exact values" in line for line in lines)
    fail = [line for line in lines if line.startswith("FAIL  numba disk cache:")]
    assert len(fail) == 1 and "Fix: set NUMBA_CACHE_DIR to a writable directory" in fail[0]
