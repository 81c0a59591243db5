"""Nothing of a run lands in the repository or the current directory (Hydra writes ``outputs/``
into the cwd by default)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl_rfpp import validation

pytestmark = pytest.mark.slow  # git, verl-rfpp check and main_ppo in processes of their own

REPO = Path(__file__).resolve().parents[2]
BASE = list(validation.RECIPES["reinforce_plus_plus_baseline"])


def _git(*args):
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout")
def test_no_hydra_output_is_tracked_and_outputs_is_ignored():
    assert _git("ls-files", "outputs").stdout == ""
    assert _git("check-ignore", "-q", "outputs/2026-01-01/00-00-00/main_ppo.log").returncode == 0


def _snapshot(directory: Path) -> set[str]:
    return {str(path.relative_to(directory)) for path in directory.rglob("*")}


def test_check_and_main_ppo_write_nothing_into_the_cwd(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**os.environ, "RAY_ADDRESS": ""}
    before = _snapshot(cwd)
    check = subprocess.run([sys.executable, "-m", "verl_rfpp.cli", "check", *BASE],
                           cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    # the suite's main_ppo path (test_validation): a refused config, Hydra's run dir in a temp dir
    run_dir = tmp_path / "run"
    refused = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=reinforce_plus_plus_baseline",
         f"hydra.run.dir={run_dir}"],
        cwd=cwd, capture_output=True, text=True, timeout=300, env=env,
    )
    assert "verl_rfpp refuses this config" in refused.stdout + refused.stderr
    assert _snapshot(cwd) == before
