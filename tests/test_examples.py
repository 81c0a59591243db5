"""Every override in every examples/*.sh passes the contract (verl-rfpp check)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.sh"))


def _recorded_arguments(script, tmp_path):
    """Run the script with a stand-in python3 that records its arguments, one per line."""
    shim = tmp_path / "bin" / "python3"
    shim.parent.mkdir()
    record = tmp_path / "arguments"
    shim.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {record}\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    subprocess.run(["bash", str(script)], check=True, env=env, capture_output=True, timeout=60)
    return record.read_text().splitlines()


def test_there_are_scripts_for_both_estimators():
    names = " ".join(path.name for path in EXAMPLES)
    assert "rfpp_baseline" in names and "rfpp.sh" in names and "multinode" in names


@pytest.mark.parametrize("script", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_script_overrides_pass_verl_rfpp_check(script, tmp_path):
    arguments = _recorded_arguments(script, tmp_path)
    assert arguments[:2] == ["-m", "verl.trainer.main_ppo"]
    overrides = arguments[2:]
    assert any(o.startswith("algorithm.adv_estimator=reinforce_plus_plus") for o in overrides)
    result = subprocess.run(["verl-rfpp", "check", *overrides], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: this config runs" in result.stdout
