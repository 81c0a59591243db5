"""``check``, ``doctor`` and ``recipe`` leave nothing behind (issue 38 item 6; docs/contract.md section
6.5): each runs as a user runs it, in a process of its own with a private, empty ``TMPDIR``, and the
directory is empty again when it ends (before: a ``verl-rfpp-check-*.log`` and a
``torchinductor_USER`` folder after every check). check starts no program of its own: a stand-in
``nvidia-smi`` first on ``PATH`` (what verl's platform probe runs) writes a witness file when run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from verl_rfpp import catalog, validation

pytestmark = pytest.mark.slow  # each command in a process of its own

BASELINE = validation.RECIPES[catalog.REINFORCE_PLUS_PLUS_BASELINE.name]
COMMANDS = {
    "check-overrides": ["check", *BASELINE, "actor_rollout_ref.rollout.n=1"],
    "check-script": ["check", "run.sh"],  # its exports make check ask a child python what verl loads
    "doctor": ["doctor"],
    "recipe": ["recipe", catalog.REINFORCE_PLUS_PLUS_BASELINE.name],
}


@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_leaves_its_temporary_directory_as_it_found_it(name, tmp_path):
    scratch, home, bin_ = tmp_path / "tmp", tmp_path / "home", tmp_path / "bin"
    for folder in (scratch, home, bin_):
        folder.mkdir()
    witness = tmp_path / "nvidia-smi-ran"
    (bin_ / "nvidia-smi").write_text(f"#!/bin/sh\necho ran >> {witness}\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    (tmp_path / "run.sh").write_text("export VERL_USE_EXTERNAL_PLUGINS=none\n"
                                     f"python3 -m verl.trainer.main_ppo {' '.join(BASELINE)}\n")
    env = {**os.environ, "TMPDIR": str(scratch), "HOME": str(home), "PATH": f"{bin_}:{os.environ['PATH']}"}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # tests/conftest.py's: a user's command has torch's default
    done = subprocess.run([sys.executable, "-m", "verl_rfpp.tools.cli", *COMMANDS[name]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert os.listdir(scratch) == [], os.listdir(scratch)
    assert name == "doctor" or not witness.exists(), "check started nvidia-smi"
