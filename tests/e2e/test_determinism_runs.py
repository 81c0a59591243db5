"""Same seed, same run; a resumed run equals an uninterrupted one (issue 31, docs/cpu-backend.md
"Same seed, same run") in verl's v1 trainer: 1 rank (a run straight to step 4; the same seed to
step 2 with a checkpoint, then resumed to 4, through ``verl-rfpp demo``; another seed) and 2 ranks
(the shared ``v1_two_output_run`` once more). The pieces, in-process: tests/cpu/test_determinism.py."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from support.trainer_runs import run_processes, two_output_run

from verl_rfpp.cli import main as cli
from verl_rfpp.cpu import checkpoints, configuration, demo, launch, run_metrics, trace

ESTIMATOR = "reinforce_plus_plus_baseline"


# --- verl's trainer: same seed, same bits; resume equals uninterrupted ---------------------------------

@dataclass
class DemoRun:
    """What a ``verl-rfpp demo`` run left: its output, its exit code, the weights digest per step
    (its trace) and ``metrics.jsonl``'s lines."""

    out: str
    code: int
    digests: dict
    metrics: list


def _demo(arguments: list[str], out: Path) -> DemoRun:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli.main(["demo", *arguments, "--out", str(out)])
    digests = run_metrics.weight_digests((out / "trace.txt").read_text().splitlines())
    return DemoRun(printed.getvalue(), code, digests, (out / run_metrics.METRICS).read_text().splitlines())


KILL_BOUND_S = 10.0  # SIGKILL of the demo's process group -> no process of its run alive (measured: 0.2-2 s)


@dataclass
class KilledRun:
    """A ``verl-rfpp demo`` killed with SIGKILL: what it printed, the digests and verl's metrics
    lines of its steps (its trace, ``verl-metrics.jsonl``), the processes of its run alive at the
    kill and those still alive ``KILL_BOUND_S`` later, Ray's temporary folders (its processes'
    ``RAY_TMPDIR``) and those still there then, the checkpoint verl's tracker named at the kill and
    after, and the files under ``checkpoints/`` changed after the kill."""

    directory: Path
    out: str
    digests: dict
    metrics: dict
    alive_at_kill: list
    left: list
    ray_folders: set
    ray_folders_left: list
    tracker: tuple
    written_after: list
    home_and_tmpdir_left: list


def _kill_demo(arguments: list[str], out: Path, ready) -> KilledRun:
    """``verl-rfpp demo ARGUMENTS --out OUT`` in a process group of its own, killed with SIGKILL
    (the group: the launcher; the trainer runs in a session of its own) once ``ready()``, with a
    private, empty ``HOME`` and ``TMPDIR`` (and torch's default cache folder, as a user's run has it)."""
    printed = out.parent / f"{out.name}.out"
    home, scratch = out.parent / f"{out.name}-home", out.parent / f"{out.name}-tmp"
    home.mkdir()
    scratch.mkdir()
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(scratch)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # tests/conftest.py's: a user's demo has torch's default
    with open(printed, "w") as stdout:
        demo = subprocess.Popen([sys.executable, "-m", "verl_rfpp.cli", "demo", *arguments, "--out", str(out)],
                                stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        deadline = time.monotonic() + 900
        while not ready() and demo.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert demo.poll() is None, printed.read_text()
        alive = run_processes(out)
        ray_folders = {_environment(p).get("RAY_TMPDIR") for p in alive} - {None}
        at_kill, killed_at = checkpoints.saved_step(out), time.time()
        os.killpg(demo.pid, signal.SIGKILL)
        demo.wait()
    gone, left = psutil.wait_procs(alive, timeout=KILL_BOUND_S)
    while "launcher ended" not in _text(out / launch.GUARD_LOG) and time.time() - killed_at < KILL_BOUND_S:
        time.sleep(0.05)  # the guard removes the run's folders after its processes, then writes its line
    ray_folders_left = sorted(folder for folder in ray_folders if os.path.exists(folder))
    written_after = [str(path) for path in (out / checkpoints.CHECKPOINTS).rglob("*")
                     if path.stat().st_mtime > killed_at]
    lines = [json.loads(line) for line in (out / run_metrics.VERL_METRICS).read_text().splitlines()]
    metrics = {line["step"]: {"step": line["step"], **{key: line["data"][key] for key in sorted(line["data"])
                                                        if not run_metrics.is_clock_metric(key)}} for line in lines}
    digests = run_metrics.weight_digests((out / "trace.txt").read_text().splitlines())
    left_behind = sorted(str(path.relative_to(out.parent)) for folder in (home, scratch) for path in folder.iterdir())
    return KilledRun(out, printed.read_text(), digests, metrics, alive, left, ray_folders, ray_folders_left,
                     (at_kill, checkpoints.saved_step(out)), written_after, left_behind)


def _environment(process: psutil.Process) -> dict:
    try:
        return process.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return {}


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


@pytest.fixture(scope="module")
def one_rank_runs(tmp_path_factory):
    """verl's v1 trainer on 1 rank, REINFORCE++-baseline with the k2 loss, seed 0: ``straight``
    (``launch.run``) to step 4; ``killed``: ``verl-rfpp demo --steps 4 --save-every 2`` killed
    with SIGKILL once it logged step 2 (its checkpoint saved; step 3 under way), then ``resumed``:
    ``verl-rfpp demo --steps 4 --resume`` in the same directory; ``doctor``: ``verl-rfpp doctor``
    between the kill and the resume (its exit code and output); ``other``: seed 1, 1 step."""
    def run(name, steps, **options):
        out = tmp_path_factory.mktemp(name)
        result = launch.run(ESTIMATOR, out, steps=steps, echo=False, timeout=900, **options)
        assert result.returncode == 0, "".join(result.log[-60:])
        return result, out

    straight = run("straight", 4)
    out = tmp_path_factory.mktemp("demo")

    def step_2_logged() -> bool:
        logged = out / run_metrics.VERL_METRICS
        return logged.exists() and '{"step":2,' in logged.read_text()

    killed = _kill_demo(["--steps", "4", "--save-every", "2"], out, step_2_logged)
    for name, cut in ((run_metrics.VERL_METRICS, '{"step": 3, "data": {"critic/sc'),
                      (trace.TRACE_FILE, "tokens pid=1 ra")):
        with open(out / name, "a") as handle:  # as a kill in the middle of a write leaves them
            handle.write(cut)
    doctor = subprocess.run([sys.executable, "-m", "verl_rfpp.cli", "doctor"], capture_output=True, text=True,
                            timeout=600)
    resumed = _demo(["--steps", "4", "--resume"], out)
    assert resumed.code == 0, resumed.out
    return {"straight": straight, "killed": killed, "doctor": doctor, "resumed": resumed,
            "other": run("other", 1, seed=1)}


@pytest.mark.e2e
def test_one_rank_same_seed_same_weights_and_metrics_every_step(one_rank_runs):
    (straight, _), killed = one_rank_runs["straight"], one_rank_runs["killed"]
    assert sorted(killed.digests)[:3] == [0, 1, 2] and len({killed.digests[step] for step in (0, 1, 2)}) == 3
    assert {step: killed.digests[step] for step in (0, 1, 2)} == {step: straight.digests[step] for step in (0, 1, 2)}
    assert {step: killed.metrics[step] for step in (1, 2)} == {step: straight.metrics[step] for step in (1, 2)}
    assert any(key.startswith("rfpp/") for key in straight.metrics[1])


@pytest.mark.e2e
def test_nothing_of_a_killed_demo_outlives_it(one_rank_runs):
    """SIGKILL of the demo's process group (the launcher alone: the trainer has a session of its
    own): within ``KILL_BOUND_S`` no process of the run is alive (the trainer and its Ray: the guard,
    ``verl_rfpp.cpu.guard``, killed them), Ray's temporary folder is removed, no checkpoint was
    written after the kill, and nothing is left in the demo's HOME or TMPDIR (issue 50 item 5: torch's
    cache and Ray's token are in the run's folder; before, ``~/.ray/auth_token`` and
    ``$TMPDIR/torchinductor_USER`` stayed after every demo)."""
    killed = one_rank_runs["killed"]
    assert len(killed.alive_at_kill) >= 5, killed.alive_at_kill  # the trainer, Ray's GCS and raylet, workers
    assert not killed.left, [(p.pid, p.name()) for p in killed.left]
    assert len(killed.ray_folders) == 1 and not killed.ray_folders_left, (killed.ray_folders, killed.ray_folders_left)
    assert killed.tracker == (2, 2) and not killed.written_after, (killed.tracker, killed.written_after)
    assert "step 4/4" not in killed.out, killed.out
    assert "killed" in (killed.directory / launch.GUARD_LOG).read_text()
    assert killed.home_and_tmpdir_left == [], killed.home_and_tmpdir_left


@pytest.mark.e2e
def test_a_killed_run_resumed_from_step_2_equals_the_run_straight_to_step_4(one_rank_runs):
    """``demo --resume`` continued after the checkpoint of step 2 of the killed run (it trained
    steps 3 and 4 only; the killed run's logger output and trace end in a line cut short) and
    ended with the weights and ``metrics.jsonl`` (steps 1-4, those of the killed run kept) of the
    run straight to step 4; its own processes rebuilt what the plugin keeps per process: our
    estimator computed steps 3 and 4 in its driver and its ``rfpp/`` metrics are those of the run
    straight to 4 (the demo's verdict: PASS)."""
    (straight, straight_out), resumed = one_rank_runs["straight"], one_rank_runs["resumed"]
    progress = [line.split()[1] for line in resumed.out.splitlines() if line.startswith("step ")]
    assert progress == ["3/4", "4/4"] and "PASS: " in resumed.out, resumed.out
    assert {step: resumed.digests[step] for step in (3, 4)} == {step: straight.digests[step] for step in (3, 4)}
    assert f"Actor weights after step 4: sha256 {straight.digest}." in resumed.out
    assert resumed.metrics == (straight_out / run_metrics.METRICS).read_text().splitlines()  # steps 1-4
    for line in resumed.metrics[2:]:  # steps 3 and 4, logged by the resumed processes
        assert all(key in json.loads(line) for key in demo.RFPP_METRICS), line
    # verl's checkpoint locks (never removed by verl) are in the run's folder, not in $TMPDIR
    assert list((one_rank_runs["killed"].directory / configuration.TEMP).glob("ckpt_*.lock"))


@pytest.mark.e2e
def test_doctor_after_a_killed_run_gives_a_fresh_machines_verdict(one_rank_runs):
    """What the kill could leave to the next process (a numba cache, the plugin's registration, the
    kernels' files) leaves ``verl-rfpp doctor`` as on a fresh install (tests/e2e/test_packaging.py):
    every check ok, and active."""
    doctor = one_rank_runs["doctor"]
    checks = [line for line in doctor.stdout.splitlines() if line.startswith(("ok  ", "FAIL"))]
    assert doctor.returncode == 0 and checks, doctor.stdout + doctor.stderr
    assert all(line.startswith("ok  ") for line in checks), doctor.stdout
    assert doctor.stdout.rstrip().endswith("verl-rfpp is active."), doctor.stdout


@pytest.mark.e2e
def test_another_seed_gives_another_run(one_rank_runs):
    (straight, _), (other, _) = one_rank_runs["straight"], one_rank_runs["other"]
    assert other.digests[0] == straight.digests[0]  # the same model before training
    assert other.digests[1] != straight.digests[1]
    assert other.metrics[1]["critic/score/mean"] != straight.metrics[1]["critic/score/mean"]


@pytest.fixture(scope="module")
def v1_two_output_run_again(tmp_path_factory):
    """``trainer_runs.two_output_run`` once more (named to sort after the shared fixture, so the
    two runs share one xdist group)."""
    return two_output_run(tmp_path_factory.mktemp("v1-two-outputs-again"))


@pytest.mark.e2e
def test_two_ranks_same_seed_same_weights_and_metrics_every_step(v1_two_output_run, v1_two_output_run_again):
    first, again = v1_two_output_run, v1_two_output_run_again
    assert sorted(first.result.digests) == [0, 1, 2]
    assert all(re.fullmatch("[0-9a-f]{64}", digest) for digest in first.result.digests.values())  # ranks agree
    assert again.result.digests == first.result.digests
    assert again.result.metrics == first.result.metrics
    assert (again.out / run_metrics.METRICS).read_text() == (first.out / run_metrics.METRICS).read_text()
