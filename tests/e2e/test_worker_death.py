"""A dead worker is loud and prompt (issue 41 item 3): one Ray worker of a running ``verl-rfpp
demo`` (an FSDP rank, ``ray::WorkerDict``) killed with SIGKILL after the checkpoint of step 1. The
demo exits 1 within ``DEATH_BOUND_S``, prints one line naming the worker and the resume command,
and no traceback; no process of the run is left (counted as benchmarks/faults.py counts: every
process whose environment names the run's trace file); the folder resumes (``resume_problem``).
1 and 2 ranks, each the shortest run with a checkpoint: ``--steps 2 --save-every 1``.
The kill matrix with other workers and points is benchmarks/faults.py (``--points worker``).
The 1-rank run's folder then serves issue 53's checks, each stopped before or as verl starts (no
trainer run added): the manifest of checkpoint 1 written by the run; a bit of it flipped, refused
by ``--resume`` in one line before Ray; a ``--resume`` while another holds the folder, refused
naming its pid; and that other one stopped by SIGTERM as verl starts: exit 143, one line with the
resume command, no process of the run and no Ray folder of it left."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from support.trainer_runs import run_processes

from verl_rfpp.cpu import checkpoints, launch

pytestmark = pytest.mark.e2e

# kill -> the demo has exited and every process of the run is gone: the watch's poll (0.5 s), verl's
# grace (WORKER_GRACE_S: it stops by itself in 6-11 s here, or is stopped then), the guard's reap
DEATH_BOUND_S = launch.WORKER_GRACE_S + 10


def _title(process: psutil.Process) -> str:
    try:
        return (process.cmdline() or [""])[0]
    except psutil.Error:
        return ""


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_dead_worker_stops_the_demo_in_one_line_and_leaves_it_resumable(tmp_path, ranks):
    out, printed = tmp_path / "run", tmp_path / "demo.out"
    with open(printed, "w") as stdout:
        demo = subprocess.Popen([sys.executable, "-m", "verl_rfpp.cli", "demo", "--steps", "2", "--save-every",
                                 "1", "--ranks", str(ranks), "--out", str(out)], stdout=stdout,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 900
        while checkpoints.saved_step(out) != 1 and demo.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert demo.poll() is None and checkpoints.saved_step(out) == 1, printed.read_text()
        workers = [p for p in run_processes(out) if _title(p).startswith("ray::WorkerDict")]
        assert len(workers) == ranks, [_title(p) for p in run_processes(out)]
        victim = workers[0]
        victim.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        code = demo.wait(timeout=DEATH_BOUND_S)
        exited_s = time.monotonic() - killed
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    left = run_processes(out)
    text = printed.read_text()
    print(f"{ranks} rank(s): exit {code} {exited_s:.1f} s after the kill; {len(left)} processes left")
    assert code == 1 and exited_s < DEATH_BOUND_S, text
    assert not left, [(p.pid, _title(p)) for p in left]
    named = [line for line in text.splitlines() if "a Ray worker of the run ended" in line]
    assert len(named) == 1, text
    resume = f"verl-rfpp demo --resume --out {out} --steps 2 --save-every 1" + (" --ranks 2" if ranks == 2 else "")
    assert f"(ray::WorkerDict pid {victim.pid}, after step 1 of 2)" in named[0], named[0]
    assert f"{out} resumes from the checkpoint of step 1: {resume} (verl's log:" in named[0], named[0]
    assert "Traceback" not in text and "Error" not in text, text  # verl's traceback is in verl.log only
    settings = json.loads((out / checkpoints.RUN_SETTINGS).read_text())
    assert checkpoints.resume_problem(out, 2, settings) is None
    if ranks == 1:
        _refusals_and_sigterm(out)


def _cli(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "verl_rfpp.cli", "demo", "--resume", "--steps", "2", "--save-every", "1",
            "--out", *arguments]


def _refusals_and_sigterm(out):
    folder = out / checkpoints.CHECKPOINTS / "global_step_1"
    files = json.loads((folder / checkpoints.MANIFEST).read_text())["files"]
    on_disk = {str(p.relative_to(folder)): {"size": p.stat().st_size,
                                            "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
               for p in folder.rglob("*") if p.is_file() and p.name != checkpoints.MANIFEST}
    assert files == on_disk and any(name.startswith("actor/") for name in files), sorted(files)

    shard = max((p for p in (folder / "actor").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    intact = shard.read_bytes()
    flipped = bytearray(intact)
    flipped[len(flipped) // 2] ^= 0x01
    shard.write_bytes(bytes(flipped))
    log_before = (out / "verl.log").stat().st_mtime_ns
    refused = subprocess.run(_cli(str(out)), capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and len(refused.stdout.splitlines()) == 1, refused.stdout + refused.stderr
    assert f"{shard}'s bytes changed" in refused.stdout and "no intact checkpoint is left" in refused.stdout
    assert (out / "verl.log").stat().st_mtime_ns == log_before and not run_processes(out)  # Ray never started
    shard.write_bytes(intact)

    printed = out.parent / "resume.out"
    with open(printed, "w") as stdout:
        first = subprocess.Popen(_cli(str(out)), stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while (out / "verl.log").stat().st_mtime_ns == log_before and time.monotonic() < deadline:
            time.sleep(0.05)  # the resume's trainer has started (its log's first line)
        assert first.poll() is None, printed.read_text()
        second = subprocess.run(_cli(str(out)), capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and second.stdout.splitlines() == [
            f"verl-rfpp demo: {out} is in use by another run (pid {first.pid}, which holds {out / checkpoints.LOCK}): "
            f"wait for it to end, stop it (kill -INT {first.pid}), or give another --out."], second.stdout
        ray_folders = {p.environ().get("RAY_TMPDIR") for p in run_processes(out)} - {None}
        assert ray_folders, [p.cmdline() for p in run_processes(out)]
        first.send_signal(signal.SIGTERM)
        code = first.wait(timeout=120)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    text = printed.read_text()
    assert code == 128 + signal.SIGTERM, text
    assert text.splitlines()[-1] == (
        f"verl-rfpp demo: interrupted (SIGTERM); stopped the trainer and its Ray processes; {out} resumes from the "
        f"checkpoint of step 1: verl-rfpp demo --resume --out {out} --steps 2 --save-every 1"), text
    assert "Traceback" not in text and not run_processes(out)
    assert not [folder for folder in ray_folders if os.path.exists(folder)]
    assert "launcher ended" in (out / launch.GUARD_LOG).read_text().splitlines()[-1]
