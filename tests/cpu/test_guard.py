"""Nothing of a run outlives its launcher (``verl_rfpp.cpu.guard``), held with plain processes in
place of verl's: a launcher that starts a guard and a "trainer" in a session of its own, which
starts children in process groups of their own (as Ray's raylet starts its workers) and a
grandchild that leaves the session (``setsid``). The launcher is killed with SIGKILL, or ends
normally; either way every process of the run is gone within ``BOUND_S``. The trainer run by
verl with the demo is tests/e2e/test_determinism_runs.py's ``test_nothing_of_a_killed_demo_outlives_it``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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
    trainer = subprocess.Popen([sys.executable, "-c", sys.argv[2]], stdout=subprocess.PIPE, text=True,
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
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path / "guard.log"), TRAINER, then,
                                 guard.__file__],
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
    assert "killed 4 processes of the run, none left after" in (tmp_path / "guard.log").read_text()


def test_a_launcher_that_ends_normally_leaves_nothing_either(tmp_path):
    launcher, run, _ = _launch(tmp_path, "end")
    assert launcher.wait(timeout=30) == 0  # leaving the with block closed the pipe and waited for the guard
    assert [p for p in run if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []


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
