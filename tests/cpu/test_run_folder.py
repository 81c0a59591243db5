"""A run's folder before anything starts (issue 53): one run per folder (an OS lock, refused in one
line naming the holder's pid), checkpoints verified against the manifest the launcher wrote
(refused in one line naming the file, what differs and the newest intact checkpoint), a tracker
naming a missing step, SIGTERM handled as Ctrl-C with the resume command, and a failed run's FAIL
line holding its cause only. No process is started: the checkpoints are files made here, the
lock is taken twice by this process (``flock`` locks belong to an open file, not to a process)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from verl_rfpp.cli import main as cli
from verl_rfpp.cpu import checkpoints, demo, launch
from verl_rfpp.errors import LaunchError

SETTINGS = {"--estimator": "reinforce_plus_plus_baseline", "--legacy": False, "--ranks": 1, "--nodes": 1,
            "--seed": 0, "--multi-turn": False}


def test_a_folder_held_by_a_run_is_refused_naming_its_pid_and_freed_with_the_lock(tmp_path):
    held = checkpoints.hold_folder(tmp_path)
    try:
        assert (tmp_path / checkpoints.LOCK).read_text() == f"{os.getpid()}\n"
        with pytest.raises(LaunchError) as refused:
            checkpoints.hold_folder(tmp_path)
        assert str(refused.value) == (
            f"{tmp_path} is in use by another run (pid {os.getpid()}, which holds {tmp_path / checkpoints.LOCK}): "
            f"wait for it to end, stop it (kill -INT {os.getpid()}), or give another --out")
    finally:
        os.close(held)
    os.close(checkpoints.hold_folder(tmp_path))  # the lock went with its descriptor: no stale file stops a run


def test_the_demo_refuses_a_held_folder_in_one_line_before_anything_starts(tmp_path, capsys):
    held = checkpoints.hold_folder(tmp_path)
    try:
        for extra in ([], ["--resume"]):
            code = cli.main(["demo", "--steps", "2", "--out", str(tmp_path), *extra])
            lines = capsys.readouterr().out.splitlines()
            assert code == 2 and len(lines) == 1, lines
            assert lines[0].startswith(f"verl-rfpp demo: {tmp_path} is in use by another run (pid {os.getpid()}, ")
    finally:
        os.close(held)
    assert sorted(path.name for path in tmp_path.iterdir()) == [checkpoints.LOCK]  # no assets, no log, no Ray


def _checkpoint(out: Path, step: int, actor: bytes = b"\x01" * 1000) -> Path:
    folder = out / checkpoints.CHECKPOINTS / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "model_world_size_1_rank_0.pt").write_bytes(actor + bytes([step]))
    (folder / "actor" / "extra_state_world_size_1_rank_0.pt").write_bytes(b"rng" * 7)
    (folder / "data.pt").write_bytes(b"loader" * 3)
    return folder


def _recorded(out: Path, *steps: int) -> None:
    """Checkpoints ``steps`` saved and recorded one after the other, as verl does, with the
    launcher's watch describing each as verl's tracker moves to it."""
    manifests = checkpoints.Manifests(out)
    for step in steps:
        _checkpoint(out, step)
        (out / checkpoints.CHECKPOINTS / checkpoints.TRACKER).write_text(str(step))
        manifests.poll()
    checkpoints.write_run_settings(out, SETTINGS)


def test_a_manifest_holds_every_file_of_the_checkpoint_with_its_size_and_sha256(tmp_path):
    _recorded(tmp_path, 1)
    folder = tmp_path / checkpoints.CHECKPOINTS / "global_step_1"
    files = json.loads((folder / checkpoints.MANIFEST).read_text())["files"]
    expected = {str(path.relative_to(folder)): {"size": len(path.read_bytes()),
                                                "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
                for path in folder.rglob("*") if path.is_file() and path.name != checkpoints.MANIFEST}
    assert files == expected and len(files) == 3
    assert checkpoints.resume_problem(tmp_path, 4, SETTINGS) is None and checkpoints.resume_note(tmp_path) is None


def _actor(out: Path, step: int) -> Path:
    return out / checkpoints.CHECKPOINTS / f"global_step_{step}" / "actor" / "model_world_size_1_rank_0.pt"


def _tracker(out: Path) -> Path:
    return out / checkpoints.CHECKPOINTS / checkpoints.TRACKER


def _instead(out: Path, step: int) -> str:
    return (f"the newest intact checkpoint is step {step} ({out / checkpoints.CHECKPOINTS / f'global_step_{step}'}): "
            f"resume from it with `echo {step} > {_tracker(out)}`, then the same --resume command")


def test_a_damaged_checkpoint_is_refused_naming_the_file_what_differs_and_the_intact_one(tmp_path):
    _recorded(tmp_path, 1, 2)
    actor = _actor(tmp_path, 2)
    data = actor.read_bytes()
    actor.write_bytes(data[:500])  # cut short
    assert checkpoints.resume_problem(tmp_path, 4, SETTINGS) == (
        f"verl's tracker {_tracker(tmp_path)} names step 2, but {actor} has 500 bytes, its manifest 1001; "
        + _instead(tmp_path, 1))
    flipped = bytearray(data)
    flipped[500] ^= 0x01  # one bit, same size
    actor.write_bytes(bytes(flipped))
    found, listed = hashlib.sha256(flipped).hexdigest(), hashlib.sha256(data).hexdigest()
    assert checkpoints.resume_problem(tmp_path, 4, SETTINGS) == (
        f"verl's tracker {_tracker(tmp_path)} names step 2, but {actor}'s bytes changed (sha256 {found[:16]}..., "
        f"its manifest {listed[:16]}...; same size); " + _instead(tmp_path, 1))
    actor.unlink()
    assert checkpoints.resume_problem(tmp_path, 4, SETTINGS) == (
        f"verl's tracker {_tracker(tmp_path)} names step 2, but {actor} is missing (its manifest lists it, 1001 "
        f"bytes); " + _instead(tmp_path, 1))
    _actor(tmp_path, 1).write_bytes(b"")  # the earlier one damaged too: nothing to resume from
    assert checkpoints.resume_problem(tmp_path, 4, SETTINGS).endswith(
        "; no intact checkpoint is left: run afresh without --resume")
    _tracker(tmp_path).write_text("1")
    assert checkpoints.resume_problem(tmp_path, 4, SETTINGS).startswith(
        f"verl's tracker {_tracker(tmp_path)} names step 1, but {_actor(tmp_path, 1)} has 0 bytes, its manifest 1001")


def test_following_the_refusal_s_advice_resumes(tmp_path):
    _recorded(tmp_path, 1, 2)
    _actor(tmp_path, 2).write_bytes(b"")
    advice = checkpoints.resume_problem(tmp_path, 4, SETTINGS)
    step = advice.split("`echo ")[1].split(" ")[0]
    _tracker(tmp_path).write_text(step)
    assert checkpoints.resume_problem(tmp_path, 4, SETTINGS) is None and checkpoints.saved_step(tmp_path) == 1


def test_a_tracker_naming_a_missing_step_points_to_the_newest_intact_checkpoint(tmp_path):
    """Was: "resume with --steps above 99", then "run afresh without --resume" beside an intact
    global_step_2."""
    _recorded(tmp_path, 1, 2)
    _tracker(tmp_path).write_text("99")
    problem = checkpoints.resume_problem(tmp_path, 4, SETTINGS)
    assert problem == (f"verl's tracker {_tracker(tmp_path)} names step 99, but "
                       f"{tmp_path / checkpoints.CHECKPOINTS / 'global_step_99'} does not exist; "
                       + _instead(tmp_path, 2))
    _tracker(tmp_path).write_text("")  # cut short by a kill
    assert checkpoints.resume_problem(tmp_path, 4, SETTINGS) == (
        f"verl's tracker {_tracker(tmp_path)} names no step (a run killed while verl wrote it): verl would stop on it; "
        + _instead(tmp_path, 2))


def test_a_checkpoint_without_a_manifest_is_checked_for_completeness_and_said_so(tmp_path):
    folder = _checkpoint(tmp_path, 1)  # saved before the launcher wrote manifests
    _tracker(tmp_path).write_text("1")
    checkpoints.write_run_settings(tmp_path, SETTINGS)
    assert checkpoints.resume_problem(tmp_path, 4, SETTINGS) is None
    assert checkpoints.resume_note(tmp_path) == (
        f"the checkpoint of step 1 has no manifest ({folder / checkpoints.MANIFEST}: saved before verl-rfpp wrote "
        "them): only its completeness was checked (actor/ and data.pt present), not its bytes")
    (folder / "data.pt").unlink()
    assert checkpoints.resume_problem(tmp_path, 4, SETTINGS) == (
        f"verl's tracker {_tracker(tmp_path)} names step 1, but {folder} lacks data.pt; no intact checkpoint is left: "
        "run afresh without --resume")


def test_a_checkpoint_saved_again_over_an_earlier_run_s_gets_a_new_manifest(tmp_path):
    """A fresh run in a folder of an earlier one writes global_step_1 again: its manifest is the new files'."""
    _recorded(tmp_path, 1)
    manifests = checkpoints.Manifests(tmp_path)  # the fresh run's watch
    _actor(tmp_path, 1).write_bytes(b"\x02" * 2000)
    _tracker(tmp_path).write_text("1")
    manifests.poll()
    assert checkpoints.resume_problem(tmp_path, 4, SETTINGS) is None


@pytest.mark.parametrize("saved", [False, True])
def test_sigterm_stops_the_demo_as_ctrl_c_with_the_resume_command(tmp_path, capsys, monkeypatch, saved):
    """A scheduler's SIGTERM: the demo's own cleanup runs (the KeyboardInterrupt unwinds launch.run's
    ``finally`` blocks: the trainer's group killed, the guards' pipes closed), one line, exit 143."""
    if saved:
        _recorded(tmp_path, 1)
    unwound = []

    def run_demo(args, out):  # in place of the trainer: a process that receives SIGTERM while it runs
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        finally:
            unwound.append(out)
        return True

    monkeypatch.setattr(cli, "_run_demo", run_demo)
    before = signal.getsignal(signal.SIGTERM)
    code = cli.main(["demo", "--steps", "2", "--save-every", "1", "--out", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert code == 128 + signal.SIGTERM and unwound == [tmp_path] and signal.getsignal(signal.SIGTERM) is before
    then = (f"{tmp_path} resumes from the checkpoint of step 1: verl-rfpp demo --resume --out {tmp_path} --steps 2 "
            "--save-every 1" if saved else
            f"{tmp_path} cannot resume: --resume continues from a checkpoint in "
            f"{tmp_path / checkpoints.CHECKPOINTS}, and there is none; run with --save-every N first (same --out)")
    assert lines == [f"verl-rfpp demo: interrupted (SIGTERM); stopped the trainer and its Ray processes; {then}"]
    os.close(checkpoints.hold_folder(tmp_path))  # the demo let its folder go


def test_a_failed_run_s_fail_line_holds_its_cause_not_its_consequences():
    """Was: a checkpoint verl could not load gave "exited with code 1", "computed the advantages 0
    times" and "a rollout server did not receive new weights" as three reasons."""
    result = launch.RunResult(returncode=1, planned_steps=4)
    result.log = ["Traceback (most recent call last):\n", "OSError: [Errno 22] Invalid argument\n"]
    result.trace = ["weights pid=9 global_steps=0 abs_sum=1 sha256=ab\n"]
    verdict = demo.judge("reinforce_plus_plus_baseline", result, 2)
    assert verdict.problems == ["verl's trainer exited with code 1: OSError: [Errno 22] Invalid argument",
                                "verl logged 0 of 2 training steps"]
    result.returncode, result.timed_out = -9, True
    assert demo.judge("reinforce_plus_plus_baseline", result, 2).problems == [
        "the run hit the demo's time limit and was stopped", "verl logged 0 of 2 training steps"]


def test_a_raylet_s_death_and_a_stall_are_named_as_such(tmp_path):
    _recorded(tmp_path, 1)
    result = launch.RunResult(returncode=1, planned_steps=2, save_every=1, log_path=tmp_path / "verl.log")
    result.log = ["ray.exceptions.ActorDiedError: ...\n", "\tclass_name: TaskRunnerV1\n", "\tpid: 77\n"]
    result.death = launch.WorkerDeath(55, "raylet", 1, 0.0, seconds=3.0, with_it=[(77, "ray::TaskRunnerV1")])
    launch._name_death(result, 1)
    assert (result.death.pid, result.death.title) == (55, "raylet")  # not the TaskRunnerV1 Ray's error names
    resume = (f"{tmp_path} resumes from the checkpoint of step 1: verl-rfpp demo --resume --out {tmp_path} --steps 2 "
              f"--save-every 1 (verl's log: {tmp_path / 'verl.log'})")
    assert demo.worker_death(result, tmp_path) == (
        "Ray's raylet of the run ended while verl trained (the Ray node's manager, pid 55, after step 1 of 2; every "
        "worker ends with it); verl's trainer stopped (exit 1), and no process of the run was left 3.0 s after; "
        + resume)
    result.returncode = -9
    result.death = launch.WorkerDeath(66, "ray::WorkerDict", 1, 0.0, stopped_by_launcher=True, seconds=1.5,
                                      stalled="stopped (state T: SIGSTOP or a debugger); the run made no progress "
                                              "for 300 s")
    assert demo.worker_death(result, tmp_path) == (
        "a process of the run stalled (ray::WorkerDict pid 66, stopped (state T: SIGSTOP or a debugger); the run made "
        "no progress for 300 s, after step 1 of 2); the demo stopped the run, and no process of the run was left 1.5 s "
        "after; " + resume)


def test_a_refused_resume_lets_its_folder_go(tmp_path, capsys):
    """Every way the demo returns drops the lock (a refusal too: a later run of the folder is not
    told it is in use)."""
    _recorded(tmp_path, 1)
    _tracker(tmp_path).write_text("99")
    assert cli.main(["demo", "--resume", "--steps", "4", "--out", str(tmp_path)]) == 2
    assert "names step 99" in capsys.readouterr().out
    os.close(checkpoints.hold_folder(tmp_path))


def test_the_demos_ray_token_is_its_own_in_the_runs_folder_unless_the_user_chose(tmp_path):
    """Ray 2.5x turns token auth on for a local cluster and, with no token anywhere, writes
    ``~/.ray/auth_token`` and leaves it (issue 50 item 5): the demo's cluster gets a token of its own
    in the run's folder instead (auth stays on), readable by its owner only; any ``RAY_AUTH_*`` a
    user set is theirs, and nothing is written."""
    from verl_rfpp.cpu import cluster

    env: dict[str, str] = {}
    path = cluster.private_auth_token(tmp_path / "tmp", env)
    assert path == str(tmp_path / "tmp" / cluster.AUTH_TOKEN_FILE) and env == {"RAY_AUTH_TOKEN_PATH": path}
    token = Path(path).read_text()
    assert len(token) == 64 and int(token, 16) >= 0 and os.stat(path).st_mode & 0o777 == 0o600
    assert cluster.private_auth_token(tmp_path / "again", {}) and Path(tmp_path / "again" / cluster.AUTH_TOKEN_FILE
                                                                       ).read_text() != token  # fresh each run
    for name in cluster.AUTH_VARIABLES:
        chosen = {name: "disabled" if name == "RAY_AUTH_MODE" else "users"}
        assert cluster.private_auth_token(tmp_path / name, chosen) is None and chosen == {name: chosen[name]}
        assert not (tmp_path / name).exists()


def test_the_demos_private_caches_last_as_long_as_its_run(tmp_path, monkeypatch):
    """During the run the demo's processes see torch's cache in the run's folder (the trainer
    inherits this process's environment); after it, this process's environment is as it was, so a
    second demo in the same process decides afresh. Ray's token is the run's own too, where the run's
    Ray starts (``configuration.command``, ``cluster.LocalCluster``): nothing of it here."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # tests/conftest.py's: a user's process has none
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    seen = []

    def run_demo(args, out):  # in place of the trainer
        seen.append({name: os.environ.get(name) for name in ("TORCHINDUCTOR_CACHE_DIR", "RAY_AUTH_TOKEN_PATH")})
        return True

    monkeypatch.setattr(cli, "_run_demo", run_demo)
    for run in ("one", "two"):
        assert cli.main(["demo", "--steps", "1", "--out", str(tmp_path / run)]) == 0
        assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ and "RAY_AUTH_TOKEN_PATH" not in os.environ
    assert seen == [{"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / run / "tmp" / "torchinductor"),
                     "RAY_AUTH_TOKEN_PATH": None} for run in ("one", "two")]
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "users"))  # a user's choice is kept, and stays
    assert cli.main(["demo", "--steps", "1", "--out", str(tmp_path / "three")]) == 0
    assert seen[-1]["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "users") == os.environ["TORCHINDUCTOR_CACHE_DIR"]
