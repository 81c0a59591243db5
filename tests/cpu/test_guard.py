"""Nothing of a run outlives its launcher (``verl_rfpp.cpu.guard``), held with plain processes in
place of verl's: a launcher that starts a guard and a "trainer" in a session of its own, which
starts children in process groups of their own (as Ray's raylet starts its workers) and a
grandchild that leaves the session (``setsid``). The launcher is killed with SIGKILL, or ends
normally; either way every process of the run is gone within ``BOUND_S``, and so is the folder the
launcher told the guard was the run's (as the demo's launcher tells it Ray's temporary folder). The trainer run by
verl with the demo is tests/e2e/test_determinism_runs.py's ``test_nothing_of_a_killed_demo_outlives_it``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from verl_rfpp.cpu import guard

pytestmark = pytest.mark.slow

BOUND_S = 5.0  # launcher gone -> no process of the run alive (measured: under 0.5 s on 2 busy cores)

# The "trainer": children in process groups of their own, and one that leaves the session.
TRAINER = """
import os, subprocess, sys, time
log = open(os.path.join(sys.argv[1], "session.log"), "a")  # a file of the run's folder, open while it runs
for _ in range(2):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], process_group=0)
subprocess.Popen(["setsid", sys.executable, "-c", "import time; time.sleep(600)"])
print("started", flush=True)
time.sleep(600)
"""

# The launcher: a guard, then the trainer in a session of its own (as launch._run starts verl).
LAUNCHER = """
import importlib.util, json, subprocess, sys, time
spec = importlib.util.spec_from_file_location("guard", sys.argv[4])  # not through verl_rfpp.cpu: no verl
guard = importlib.util.module_from_spec(spec)
spec.loader.exec_module(guard)
with guard.Guard(sys.argv[1]) as watch:
    watch.folder(sys.argv[5])
    trainer = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[5]], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    watch.session(trainer.pid)
    trainer.stdout.readline()
    print(json.dumps({"trainer": trainer.pid}), flush=True)
    if sys.argv[3] == "wait":
        time.sleep(600)
"""


def _run_processes(marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("RFPP_GUARD_TEST") == marker and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _launch(tmp_path: Path, then: str) -> tuple[subprocess.Popen, list[psutil.Process], str]:
    marker = f"{os.getpid()}-{tmp_path.name}-{then}"
    (tmp_path / "run-tmp" / "session").mkdir(parents=True)
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path / "guard.log"), TRAINER, then,
                                 guard.__file__, str(tmp_path / "run-tmp")],
                                stdout=subprocess.PIPE, text=True, start_new_session=True,
                                env={**os.environ, "RFPP_GUARD_TEST": marker})
    json.loads(launcher.stdout.readline())
    deadline = time.monotonic() + 30
    while len(_run_processes(marker)) < 6 and time.monotonic() < deadline:  # launcher, guard, trainer, 3 children
        time.sleep(0.1)
    return launcher, [p for p in _run_processes(marker) if p.pid != launcher.pid], marker


@pytest.mark.parametrize("how", ["process", "group"])
def test_a_launcher_killed_with_sigkill_leaves_nothing_of_its_run(tmp_path, how):
    launcher, run, marker = _launch(tmp_path, "wait")
    trainer_side = [p for p in run if "guard.py" not in " ".join(p.cmdline())]
    assert len(trainer_side) == 4, [p.cmdline() for p in run]
    sessions = {os.getsid(p.pid) for p in trainer_side}
    assert len(sessions) == 2  # one left the trainer's session: found as its descendant
    started = time.monotonic()
    if how == "process":
        launcher.kill()
    else:
        os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait()
    _, left = psutil.wait_procs(run, timeout=BOUND_S)
    assert not left, [(p.pid, p.cmdline()) for p in left]
    assert time.monotonic() - started < BOUND_S
    assert _run_processes(marker) == []
    while not (tmp_path / "guard.log").exists() and time.monotonic() - started < BOUND_S:
        time.sleep(0.05)  # the guard writes its line last
    line = (tmp_path / "guard.log").read_text()
    assert "killed 4 processes of the run, none left after" in line and "removed 1 of the 1 folders" in line, line
    assert not (tmp_path / "run-tmp").exists()


def test_a_launcher_that_ends_normally_leaves_nothing_either(tmp_path):
    launcher, run, _ = _launch(tmp_path, "end")
    assert launcher.wait(timeout=30) == 0  # leaving the with block closed the pipe and waited for the guard
    assert [p for p in run if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    assert not (tmp_path / "run-tmp").exists()


def test_a_reused_pid_is_not_taken_for_a_process_of_the_run():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = guard._stat(sleeper.pid)[2]
        assert guard.members(set(), {sleeper.pid: start}) == {sleeper.pid}
        assert guard.members(set(), {sleeper.pid: start + 1}) == set()  # another process under that pid
        assert os.getpid() not in guard.members({os.getsid(0)}, {})  # never the guard itself
    finally:
        sleeper.kill()
        sleeper.wait()


# A "trainer" whose children carry Ray workers' titles (``exec -a``: argv[0] is what ``ps`` shows).
WORKERS = """
import subprocess, sys, time
for title in ("ray::WorkerDict.update_actor", "ray::IDLE", "ray::HFRolloutServer", "ray::RuntimeEnvAgent",
              "ray::DashboardAgent"):
    subprocess.Popen(["bash", "-c", f"exec -a {title} sleep 600"], process_group=0)
print("started", flush=True)
time.sleep(600)
"""


def _workers_trainer() -> tuple[subprocess.Popen, dict[str, int]]:
    trainer = subprocess.Popen([sys.executable, "-c", WORKERS], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    trainer.stdout.readline()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        titles = {guard.title(pid): pid for pid in guard.members({trainer.pid}, {})}
        if {"ray::WorkerDict.update_actor", "ray::IDLE", "ray::HFRolloutServer", *guard.RAY_AGENTS} <= set(titles):
            return trainer, titles
        time.sleep(0.05)
    raise AssertionError(titles)


def test_the_watch_names_the_first_ray_worker_that_ends_and_not_an_idle_one_nor_an_agent():
    """Neither an idle worker nor a node's agents (Ray ends them with the node: seen as a worker's
    death when a Ray start timed out under load) are watched."""
    trainer, titles = _workers_trainer()
    try:
        watch = guard.WorkerWatch(trainer.pid)
        assert watch.poll() == [] and len(watch.watched) == 2  # neither the idle worker nor the agents
        for name in ("ray::IDLE", *guard.RAY_AGENTS):
            os.kill(titles[name], signal.SIGKILL)
        time.sleep(0.2)
        assert watch.poll() == []
        os.kill(titles["ray::WorkerDict.update_actor"], signal.SIGKILL)
        deadline = time.monotonic() + 5
        while not (gone := watch.poll()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone == [(titles["ray::WorkerDict.update_actor"], "ray::WorkerDict")]
    finally:
        guard.reap({trainer.pid}, {})
        trainer.wait()


def test_a_trainer_that_waits_on_a_dead_worker_is_stopped_after_the_grace(monkeypatch, tmp_path):
    """A driver left waiting for ever on a dead actor: the launcher's watch gives it
    ``WORKER_GRACE_S``, then kills every process of its session."""
    from verl_rfpp.cpu import launch

    monkeypatch.setattr(launch, "WORKER_GRACE_S", 1.0)
    trainer, titles = _workers_trainer()
    result = launch.RunResult(returncode=-1, planned_steps=2)
    try:
        watching = threading.Thread(target=launch._watch_workers, args=(trainer, result, 2, tmp_path), daemon=True)
        watching.start()
        time.sleep(1.0)  # the watch has read the session
        os.kill(titles["ray::HFRolloutServer"], signal.SIGKILL)
        started = time.monotonic()
        watching.join(timeout=10)
        assert trainer.wait(timeout=5) == -signal.SIGKILL and time.monotonic() - started < 5
        assert (result.death.pid, result.death.title, result.death.after_step) == (
            titles["ray::HFRolloutServer"], "ray::HFRolloutServer", 0)
        assert result.death.stopped_by_launcher and guard.members({trainer.pid}, {}) == set()
    finally:
        guard.reap({trainer.pid}, {})
        trainer.wait()


@pytest.mark.parametrize("stopped", ["ray::HFRolloutServer", None])
def test_a_run_without_progress_is_stopped_naming_the_process_it_waits_on(tmp_path, stopped):
    """issue 53: a stopped worker (SIGSTOP: no process ends, so no death is seen) or one whose task
    never returns. Once the workers are up (a first trace line) and nothing moves (no step, trace
    line or checkpoint) for the bound: the stopped process is named, else the one busy in a task
    (its title names the method), and every process of the session is killed."""
    from verl_rfpp.cpu import launch

    (tmp_path / "trace.txt").write_text("weights pid=1 global_steps=0 abs_sum=1\n")
    trainer, titles = _workers_trainer()
    result = launch.RunResult(returncode=-1, planned_steps=2)
    try:
        if stopped:
            os.kill(titles[stopped], signal.SIGSTOP)
        watching = threading.Thread(target=launch._watch_workers, args=(trainer, result, 2, tmp_path),
                                    kwargs={"stall_s": 1.0}, daemon=True)
        watching.start()
        watching.join(timeout=15)
        assert trainer.wait(timeout=5) == -signal.SIGKILL
        pid, title, how = ((titles[stopped], stopped, "stopped (state T") if stopped else
                           (titles["ray::WorkerDict.update_actor"], "ray::WorkerDict.update_actor", "in a task"))
        assert (result.death.pid, result.death.title, result.death.stopped_by_launcher) == (pid, title, True)
        assert result.death.stalled.startswith(how) and "the run made no progress for 1 s" in result.death.stalled
        assert guard.members({trainer.pid}, {}) == set()
    finally:
        guard.reap({trainer.pid}, {})
        trainer.wait()


RAYLET = """
import subprocess, sys, time
for title in ("/x/ray/core/src/ray/raylet/raylet", "ray::WorkerDict.update_actor"):
    subprocess.Popen(["bash", "-c", f"exec -a {title} sleep 600"], process_group=0)
print("started", flush=True)
time.sleep(600)
"""


def test_a_raylet_that_ends_is_named_before_the_workers_that_end_with_it(monkeypatch, tmp_path):
    """issue 53: a killed raylet was reported as the death of ``ray::TaskRunnerV1`` (its workers end
    with it): of the processes gone in one look, the raylet is the death."""
    from verl_rfpp.cpu import launch

    monkeypatch.setattr(launch, "WORKER_GRACE_S", 0.5)
    trainer = subprocess.Popen([sys.executable, "-c", RAYLET], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    trainer.stdout.readline()
    result = launch.RunResult(returncode=-1, planned_steps=2)
    try:
        deadline = time.monotonic() + 10
        names = {"ray::WorkerDict.update_actor", "/x/ray/core/src/ray/raylet/raylet"}
        # both children have exec'd under their titles (before that, one may still be `bash -c`)
        while not names <= set(titles := {guard.title(pid): pid for pid in guard.members({trainer.pid}, {})}):
            assert time.monotonic() < deadline, titles
            time.sleep(0.05)
        watching = threading.Thread(target=launch._watch_workers, args=(trainer, result, 2, tmp_path), daemon=True)
        watching.start()
        time.sleep(1.0)  # the watch has read the session
        for name in ("ray::WorkerDict.update_actor", "/x/ray/core/src/ray/raylet/raylet"):  # the worker first
            os.kill(titles[name], signal.SIGSTOP)
        for name in ("ray::WorkerDict.update_actor", "/x/ray/core/src/ray/raylet/raylet"):
            os.kill(titles[name], signal.SIGKILL)
        watching.join(timeout=10)
        assert (result.death.pid, result.death.title) == (titles["/x/ray/core/src/ray/raylet/raylet"], "raylet")
        assert result.death.with_it == [(titles["ray::WorkerDict.update_actor"], "ray::WorkerDict")]
    finally:
        guard.reap({trainer.pid}, {})
        trainer.wait()


def _guard_of(run: list[psutil.Process], role: str) -> psutil.Process:
    return next(p for p in run if "guard.py" in " ".join(p.cmdline()) and role in p.cmdline())


def test_the_guard_killed_with_its_launcher_leaves_the_standby_to_reap_the_run(tmp_path):
    """issue 53: no single point of cleanup. The primary guard killed (its end recorded by the
    standby while the launcher lives), then the launcher: the standby kills every process of the
    run and removes its folder within ``BOUND_S``, and says so in the log."""
    launcher, run, marker = _launch(tmp_path, "wait")
    deadline = time.monotonic() + 10
    while sum("guard.py" in " ".join(p.cmdline()) for p in _run_processes(marker)) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    run = [p for p in _run_processes(marker) if p.pid != launcher.pid]
    primary, standby = _guard_of(run, "primary"), _guard_of(run, "standby")
    primary.kill()  # a zombie until the launcher ends: the standby's line says it saw the end
    log = tmp_path / "guard.log"
    while not (log.exists() and "the primary guard" in log.read_text()):
        assert time.monotonic() < deadline + 10
        time.sleep(0.05)
    started = time.monotonic()
    launcher.kill()
    launcher.wait()
    _, left = psutil.wait_procs([p for p in run if p.pid != primary.pid], timeout=BOUND_S)
    assert not left, [(p.pid, p.cmdline()) for p in left]
    assert time.monotonic() - started < BOUND_S and _run_processes(marker) == []
    lines = (tmp_path / "guard.log").read_text().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"the primary guard (pid {primary.pid}) ended at ") and lines[0].endswith(
        f"while the run went on (killed?); the standby guard (pid {standby.pid}) still guards it")
    assert "killed 4 processes of the run, none left after" in lines[1] and "removed 1 of the 1 folders" in lines[1]
    assert lines[1].endswith(f"(by the standby guard, pid {standby.pid}: the primary had ended)")
    assert not (tmp_path / "run-tmp").exists()
