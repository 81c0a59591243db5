"""``check``, ``doctor`` and ``recipe`` leave nothing behind (issue 38 item 6, issue 50 item 5;
docs/contract.md section 6.5): each runs as a user runs it, in a process of its own with a private,
empty ``TMPDIR`` and ``HOME``, and both are empty again when it ends (before: a ``verl-rfpp-check-*.log`` and a
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
    done = subprocess.run([sys.executable, "-m", "verl_rfpp.cli", *COMMANDS[name]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert os.listdir(scratch) == [] and os.listdir(home) == [], (os.listdir(scratch), os.listdir(home))
    assert name == "doctor" or not witness.exists(), "check started nvidia-smi"


def test_the_demos_trainer_keeps_hugging_faces_datasets_cache_in_the_runs_folder(tmp_path):
    """What verl's dataset does with the demo's parquet files (``datasets.load_dataset("parquet")``, a
    cache folder and a lock per file), in the demo trainer's environment with a private HOME and
    TMPDIR: all of it in the run's folder (before: under ~/.cache/huggingface/datasets, every demo)."""
    import pandas

    from verl_rfpp.cpu import configuration

    run, home, scratch = tmp_path / "run", tmp_path / "home", tmp_path / "tmp"
    for folder in (run, home, scratch):
        folder.mkdir()
    pandas.DataFrame({"prompt": ["1+1", "2+2"]}).to_parquet(run / "train.parquet")
    env = {**configuration.trainer_environment(run), "HOME": str(home)}
    env["TMPDIR"] = str(scratch)  # the trainer's own (the run's tmp/) would hide what lands in a TMPDIR
    data = str(run / "train.parquet")
    code = f"import datasets; print(len(datasets.load_dataset('parquet', data_files={data!r})['train']))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.split()[-1] == "2", done.stderr[-2000:]
    assert os.listdir(home) == [] and os.listdir(scratch) == [], (os.listdir(home), os.listdir(scratch))
    cache = run / configuration.TEMP / "huggingface" / "datasets"
    assert any(cache.iterdir()), "the datasets cache is not in the run's folder"
