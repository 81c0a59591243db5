"""The kill matrix: ``verl-rfpp demo --steps 4 --save-every 1`` killed with SIGKILL (its whole
process group, as a scheduler or the OOM killer of a job would) at chosen points, then resumed with
``verl-rfpp demo --resume --steps 4`` to the end, and compared with the uninterrupted run of the
same seed (docs/cpu-backend.md, "Faults").

Kill points (each in step 2, after the checkpoint of step 1; observed from outside, by polling the
run's files every 20 ms):

- ``rollout``: 0.3 s after step 1's metrics line (verl logs it after the checkpoint and the weight
  sync, then starts step 2's rollout); landed if the trace has no step-2 advantages yet;
- ``update``: at step 2's first policy-loss call (the trace's ``tokens`` line): the actor update;
- ``checkpoint-write``: when ``checkpoints/global_step_2`` appears; landed if verl's tracker still
  says 1 after the kill (the checkpoint was half-written);
- ``after-checkpoint``: when the tracker says 2;
- ``resume-first-step``: the run killed after checkpoint 1, then its resume killed at its first
  policy-loss call, then resumed again.
- ``worker``: not the demo but one of its Ray workers, the FSDP rank (``ray::WorkerDict``), killed
  with SIGKILL as the tracker says 1; the demo must stop by itself: its exit code and seconds after
  the kill, the one line naming the worker (and no traceback) in its output, the processes of the
  run left when it exited.
- ``disk-full``: no kill: ``DIR/checkpoints`` is a tmpfs of ``FULL_BYTES`` (root and ``mount``
  needed; else the cell says why it did not run), so verl's write of checkpoint 2 fails with
  ENOSPC; the demo must stop by itself (exit 1, the one line, no traceback), the tracker at 1;
  then the tmpfs grows (``mount -o remount``, its files kept) and ``--resume`` runs to the end.
- ``read-only``: no kill: ``DIR/checkpoints`` is a tmpfs remounted read-only as verl's tracker says 1
  (a read-only folder does not stop root; a read-only mount does), so verl's write of checkpoint 2
  fails with EROFS; judged as ``disk-full``; then it is remounted read-write and ``--resume`` runs.
- ``sigterm``, ``raylet``, ``stopped-worker``, ``guard-kill`` (issue 53), each as the tracker says 1:
  SIGTERM to the demo (what a scheduler sends); SIGKILL of the run's raylet; SIGSTOP of the FSDP
  rank (``ray::WorkerDict``, left stopped: the demo must name it within ``launch.STALL_S``); SIGKILL
  of the primary guard, then 1 s later of the demo process alone. Landed: the demo's own line naming
  what happened with the resume command (``sigterm``: exit 143; ``raylet``, ``stopped-worker``:
  exit 1), no traceback; ``guard-kill``: no process of the run and no ``/tmp/rfpp-ray-*`` folder of
  it left ``GUARD_BOUND_S`` after the demo's kill, the standby guard's line in ``guard.log``.
- ``truncated``, ``bit-flip``, ``missing-step``: the run killed once checkpoint 2's manifest is
  written, then the actor's largest file of ``global_step_2`` cut to half, or one byte of it
  flipped, or the tracker set to 99; ``--resume`` must refuse in one line (exit 2) naming the file
  (or the missing step) and the newest intact checkpoint (1; ``missing-step``: 2) before Ray starts (no ``verl.log``
  written); then the line's advice is followed (the tracker set to 1) and ``--resume`` runs.
- ``double-resume``: the run killed as the tracker says 1, then two ``--resume`` started 2 s apart:
  the second must refuse in one line (exit 2) naming the first's pid; the first runs to the end.
- two kills in a row: ``resume-first-step`` above.

Per kill: whether it landed where named, the checkpoint verl's tracker names after it, the steps
the killed run had logged beyond that checkpoint (lost), the processes of the run alive at the kill
(every process whose environment names the run's trace file) and the seconds until none of them
was left, whether any file under ``checkpoints/`` changed after that, and whether the resumed run
ended with the uninterrupted run's weights digest and ``metrics.jsonl``. One demo at a time;
every record is appended to ``OUT/faults.jsonl`` as it completes (a cell already there is not run
again: a second command continues the matrix), and the table is printed from it.

    nice -n 10 python benchmarks/faults.py --out /tmp/faults
    python benchmarks/faults.py --out /tmp/faults --estimators reinforce_plus_plus --points update
    python benchmarks/faults.py --out /tmp/faults --table      # the table of the records so far

One script of over 600 lines on purpose: a benchmark run by hand, its kill points, their judging
and the table in one file that runs alone (no test imports it; tests/project checks its --help).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ESTIMATORS = ("reinforce_plus_plus_baseline", "reinforce_plus_plus")
POINTS = ("checkpoint-write", "update", "rollout", "after-checkpoint", "resume-first-step", "worker", "disk-full",
          "read-only", "sigterm", "raylet", "stopped-worker", "guard-kill", "truncated", "bit-flip", "missing-step",
          "double-resume")
SIGNALLED = ("sigterm", "raylet", "stopped-worker", "guard-kill")  # a signal to one process of the run at checkpoint 1
DAMAGED = ("truncated", "bit-flip", "missing-step")  # the run killed after checkpoint 2, which is then damaged
FAILED_WRITES = ("disk-full", "read-only")  # no kill: verl's write of checkpoint 2 fails, the demo must stop itself
FULL_BYTES = 700 * 1024  # a tmpfs this size holds the demo's first checkpoint (431 KB) and not its second
ROOM_BYTES = 64 * 1024 * 1024  # a tmpfs this size holds every checkpoint of the demo (the resume's too)
STEPS = 4
RUN_LIMIT_S = 1800  # one demo, on a loaded 2-core machine
GONE_LIMIT_S = 60


def demo(out: Path, *options: str) -> subprocess.Popen:
    """``verl-rfpp demo`` (this checkout's) in a process group of its own, its output to
    ``OUT.<time>.log`` (``_demo_output``)."""
    log = open(f"{out}.{time.time_ns()}.log", "w")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen([sys.executable, "-m", "verl_rfpp.cli", "demo", "--steps", str(STEPS),
                             *options, "--out", str(out)], stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def tracker(out: Path):
    text = _read(out / "checkpoints" / "latest_checkpointed_iteration.txt").strip()
    return int(text) if text.isdigit() else None


def trace_count(out: Path, kind: str) -> int:
    return sum(line.startswith(kind + " ") for line in _read(out / "trace.txt").splitlines())


def logged_steps(out: Path) -> list[int]:
    steps = set()
    for line in _read(out / "verl-metrics.jsonl").splitlines():
        try:
            steps.add(int(json.loads(line)["step"]))
        except (ValueError, KeyError):
            pass
    return sorted(steps)


def run_processes(out: Path) -> dict[int, int]:
    """``{pid: start time}`` of every live process whose environment names ``out``'s trace file."""
    needle = f"VERL_RFPP_TRACE={out / 'trace.txt'}".encode()
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if needle in Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                    found[int(name)] = _start(int(name))
            except OSError:
                pass
    return {pid: start for pid, start in found.items() if start is not None}


def _start(pid: int):
    """The start time of ``pid`` if it is alive (a zombie is dead), else ``None``."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2:].split()
    return None if fields[0] in "ZX" else int(fields[19])


def wait_for(condition, process: subprocess.Popen, out: Path, seen: dict[int, int]) -> bool:
    """Poll ``condition`` every 20 ms until it holds (``True``) or the demo ended; every 5 s the
    run's processes are added to ``seen`` (a scan of every process's environment is too slow to
    make at the moment of the kill)."""
    started = scanned = time.monotonic()
    while time.monotonic() - started < RUN_LIMIT_S:
        if condition():
            return True
        if process.poll() is not None:
            return False
        if time.monotonic() - scanned > 5:
            seen.update(run_processes(out))
            scanned = time.monotonic()
        time.sleep(0.02)
    return False


def kill(process: subprocess.Popen, out: Path, seen: dict[int, int]) -> dict:
    """SIGKILL the demo's process group; the run's processes alive then (``seen`` before and a scan
    just after), how long until none of them was, whether verl's tracker moved after the kill,
    and the checkpoint files changed after it (those a worker was writing when the guard stopped it)."""
    at_kill = tracker(out)
    alive = {pid: start for pid, start in seen.items() if _start(pid) == start}  # alive just before the kill
    killed_at = time.time()
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    alive.update(run_processes(out))  # any the scans had not seen yet, still alive after it
    left: set = set()
    while time.time() - killed_at < GONE_LIMIT_S:
        left = {pid for pid, start in alive.items() if _start(pid) == start}
        if not left:
            break
        time.sleep(0.02)
    gone_s = time.time() - killed_at
    time.sleep(1.0)
    changed = [path.stat().st_mtime - killed_at for path in (out / "checkpoints").rglob("*")
               if path.stat().st_mtime > killed_at]
    return {"alive_at_kill": len(alive), "gone_s": round(gone_s, 3), "left": len(left),
            "tracker_moved": tracker(out) != at_kill, "files_after_kill": len(changed),
            "last_file_after_kill_s": round(max(changed), 3) if changed else None,
            "guard": _read(out / "guard.log").strip().splitlines()[-1:]}


def _title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").split(" ")[0]
    except OSError:
        return ""


DEATH_LINE = "a Ray worker of the run ended"  # the demo's line (verl_rfpp.cpu.demo.worker_death)


def kill_worker(process: subprocess.Popen, out: Path, seen: dict[int, int]) -> dict:
    """SIGKILL one FSDP worker of the run (``ray::WorkerDict``), not the demo; wait for the demo to
    end by itself: its exit code and the seconds after the kill, the processes of the run left
    then, the demo's line naming the death, and whether its output holds a traceback."""
    alive = {pid: start for pid, start in {**seen, **run_processes(out)}.items() if _start(pid) == start}
    workers = sorted(pid for pid in alive if _title(pid).startswith("ray::WorkerDict"))
    at_kill, killed_at = tracker(out), time.time()
    os.kill(workers[0], signal.SIGKILL)
    try:
        code = process.wait(timeout=GONE_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        code = process.wait()
    exit_s = time.time() - killed_at
    left = {pid for pid, start in alive.items() if _start(pid) == start}
    changed = [path.stat().st_mtime - killed_at for path in (out / "checkpoints").rglob("*")
               if path.stat().st_mtime > killed_at]
    output = _demo_output(out)
    named = [line for line in output.splitlines() if DEATH_LINE in line]
    return {"alive_at_kill": len(alive), "gone_s": round(exit_s, 3), "left": len(left), "exit": code,
            "tracker_moved": tracker(out) != at_kill, "files_after_kill": len(changed),
            "last_file_after_kill_s": round(max(changed), 3) if changed else None, "line": named[-1] if named else "",
            "traceback": "Traceback" in output, "guard": _read(out / "guard.log").strip().splitlines()[-1:]}


def digest_of(output: str) -> str:
    match = re.findall(r"Actor weights after step \d+: sha256 ([0-9a-f]{64})", output)
    return match[-1] if match else ""


def reference(base: Path, estimator: str) -> dict:
    """The uninterrupted run (reused if ``base/ref-ESTIMATOR`` holds a finished one)."""
    out = base / f"ref-{estimator}"
    record = out / "reference.json"
    if record.exists():
        return json.loads(record.read_text())
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.monotonic()
    process = demo(out, "--save-every", "1", "--estimator", estimator)
    code = process.wait(timeout=RUN_LIMIT_S)
    text = _demo_output(out)
    if code != 0 or not digest_of(text):
        raise SystemExit(f"the uninterrupted {estimator} run failed (exit {code}); see {out}")
    ref = {"digest": digest_of(text), "metrics": (out / "metrics.jsonl").read_text(),
           "seconds": round(time.monotonic() - started, 1)}
    record.write_text(json.dumps(ref))
    return ref


def _demo_output(out: Path) -> str:
    logs = sorted(out.parent.glob(f"{out.name}.*.log"), key=lambda path: int(path.name.rsplit(".", 2)[1]))
    return logs[-1].read_text() if logs else ""


def _settled(folder: Path) -> bool:
    """``folder`` exists and nothing was added to it for 0.5 s (the actor's files are written)."""
    try:
        return folder.stat().st_mtime < time.time() - 0.5
    except OSError:
        return False


def kill_at(out: Path, estimator: str, point: str, resumed: bool) -> dict:
    """One run (fresh, or ``resumed``) of ``out`` killed at ``point``: the kill's record."""
    if resumed:
        (out / "trace.txt").unlink(missing_ok=True)
    options = ("--resume",) if resumed else ("--save-every", "1")
    if point == "checkpoint-write":  # verl's driver blocks opening it: the kill lands inside the write
        (out / "checkpoints" / "global_step_2").mkdir(parents=True)
        os.mkfifo(out / "checkpoints" / "global_step_2" / "data.pt")
    process = demo(out, *options, "--estimator", estimator)
    seen: dict[int, int] = {}
    conditions = {
        "rollout": lambda: 1 in logged_steps(out),
        "update": lambda: trace_count(out, "tokens") >= (1 if resumed else 2),
        "checkpoint-write": lambda: _settled(out / "checkpoints" / "global_step_2" / "actor"),
        "after-checkpoint": lambda: tracker(out) == 2,
        "checkpoint-1": lambda: tracker(out) == 1,
        "worker": lambda: tracker(out) == 1,
    }
    if not wait_for(conditions[point], process, out, seen):
        process.wait(timeout=RUN_LIMIT_S)
        return {"point": point, "reached": False, "output": _demo_output(out)[-2000:]}
    if point == "rollout":
        time.sleep(0.3)
    advantages = trace_count(out, estimator)
    record = {"point": point, "reached": True,
              **(kill_worker if point == "worker" else kill)(process, out, seen)}
    record["checkpoint"] = tracker(out)
    record["lost"] = [step for step in logged_steps(out) if step > (record["checkpoint"] or 0)]
    record["landed"] = {"rollout": advantages == 1, "update": record["checkpoint"] == 1,
                        "checkpoint-write": record["checkpoint"] == 1, "after-checkpoint": record["checkpoint"] == 2,
                        "checkpoint-1": record["checkpoint"] == 1,
                        "worker": record["checkpoint"] == 1 and record.get("exit") == 1 and bool(record.get("line"))
                        and not record.get("traceback") and not record["left"]}[point]
    return record


CHECKPOINT_LINE = "verl could not write a checkpoint in"  # the demo's line (verl_rfpp.cpu.demo.checkpoint_failure)


def failed_write(out: Path, estimator: str, point: str) -> dict:
    """The ``disk-full`` and ``read-only`` points: the demo's run on a ``DIR/checkpoints`` too small
    for its second checkpoint, or made read-only once the first is recorded (a tmpfs, made writable
    and large after, for the resume): the record of its end, as a kill's."""
    checkpoints = out / "checkpoints"
    checkpoints.mkdir()
    size = FULL_BYTES if point == "disk-full" else ROOM_BYTES
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(checkpoints)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        return {"point": point, "reached": False, "output": f"mount: {mounted.stderr.strip()}"}
    started = time.time()
    process = demo(out, "--save-every", "1", "--estimator", estimator)
    if point == "read-only":
        if not wait_for(lambda: tracker(out) == 1, process, out, {}):
            process.wait()
            return {"point": point, "reached": False, "output": _demo_output(out)[-2000:]}
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(checkpoints)], capture_output=True, text=True)
        if remounted.returncode != 0:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return {"point": point, "reached": False, "output": f"mount -o remount,ro: {remounted.stderr.strip()}"}
    code = process.wait(timeout=RUN_LIMIT_S)
    output = _demo_output(out)
    line = [text for text in output.splitlines() if CHECKPOINT_LINE in text]
    subprocess.run(["mount", "-o", f"remount,rw,size={ROOM_BYTES}", str(checkpoints)], check=True)
    return {"point": point, "reached": True, "exit": code, "gone_s": round(time.time() - started, 3),
            "alive_at_kill": 0, "left": len(run_processes(out)), "tracker_moved": False, "files_after_kill": 0,
            "last_file_after_kill_s": None, "line": line[-1] if line else "", "traceback": "Traceback" in output,
            "checkpoint": tracker(out), "lost": [s for s in logged_steps(out) if s > (tracker(out) or 0)],
            "landed": code == 1 and bool(line) and "Traceback" not in output and tracker(out) == 1}


GUARD_BOUND_S = 10.0  # guard-kill: the run's processes and its Ray folder gone this long after the demo's kill


def _demo_line(output: str) -> str:
    """The demo's last line of its own (``verl-rfpp demo: ...``)."""
    lines = [line for line in output.splitlines() if line.startswith("verl-rfpp demo: ")]
    return lines[-1] if lines else ""


def _ray_folder(pids) -> str:
    """The run's Ray folder (``RAY_TMPDIR`` of a process of the run)."""
    for pid in pids:
        try:
            for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                if item.startswith(b"RAY_TMPDIR="):
                    return item.split(b"=", 1)[1].decode()
        except OSError:
            continue
    return ""


def _guards(out: Path) -> dict[str, int]:
    """``{role: pid}`` of the run's guards (``python -I .../guard.py OUT/guard.log ROLE ...``)."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                words = Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if len(words) > 4 and words[2].endswith("guard.py") and words[3] == str(out / "guard.log"):
                found[words[4]] = int(name)
    return found


def signalled(out: Path, estimator: str, point: str) -> dict:
    """``sigterm``, ``raylet``, ``stopped-worker``, ``guard-kill``: one signal as the tracker says 1,
    the demo's end (or, ``guard-kill``, the run's processes and Ray folder after the demo's kill)."""
    sys.path.insert(0, str(ROOT))  # this checkout's, as the demo's
    from verl_rfpp.cpu import launch

    process = demo(out, "--save-every", "1", "--estimator", estimator)
    seen: dict[int, int] = {}
    if not wait_for(lambda: tracker(out) == 1, process, out, seen):
        process.wait(timeout=RUN_LIMIT_S)
        return {"point": point, "reached": False, "output": _demo_output(out)[-2000:]}
    alive = {pid: start for pid, start in {**seen, **run_processes(out)}.items() if _start(pid) == start}
    folder = _ray_folder(alive)
    at_kill, signalled_at = tracker(out), time.time()
    record = {"point": point, "reached": True, "alive_at_kill": len(alive)}
    if point == "sigterm":
        os.kill(process.pid, signal.SIGTERM)
    elif point == "raylet":
        os.kill(next(pid for pid in alive if _title(pid).endswith("/raylet")), signal.SIGKILL)
    elif point == "stopped-worker":
        os.kill(min(pid for pid in alive if _title(pid).startswith("ray::WorkerDict")), signal.SIGSTOP)
    else:
        guards = _guards(out)
        record["guards"] = sorted(guards)
        os.kill(guards["primary"], signal.SIGKILL)
        time.sleep(1.0)
        signalled_at = time.time()
        os.kill(process.pid, signal.SIGKILL)
    limit = launch.STALL_S + GONE_LIMIT_S if point == "stopped-worker" else GONE_LIMIT_S
    try:
        code = process.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        code = process.wait()
    exit_s = time.time() - signalled_at
    left: set = set()
    while time.time() - signalled_at < GONE_LIMIT_S + (exit_s if point != "guard-kill" else 0):
        left = {pid for pid, start in alive.items() if _start(pid) == start}
        if not left:
            break
        time.sleep(0.02)
    gone_s = time.time() - signalled_at
    time.sleep(0.5)
    output = _demo_output(out)
    guard_log = _read(out / "guard.log").strip().splitlines()
    record.update(exit=code, gone_s=round(gone_s if point == "guard-kill" else exit_s, 3), left=len(left),
                  folder_left=bool(folder) and os.path.exists(folder), line=_demo_line(output),
                  traceback="Traceback" in output, tracker_moved=tracker(out) != at_kill, files_after_kill=0,
                  last_file_after_kill_s=None, guard=guard_log[-2:], checkpoint=tracker(out),
                  lost=[s for s in logged_steps(out) if s > (tracker(out) or 0)])
    resumes = "resumes from the checkpoint of step 1: verl-rfpp demo --resume" in record["line"]
    record["landed"] = {
        "sigterm": code == 128 + signal.SIGTERM and "interrupted (SIGTERM)" in record["line"] and resumes,
        "raylet": code == 1 and "Ray's raylet of the run ended" in record["line"] and resumes,
        "stopped-worker": code == 1 and "stalled (ray::WorkerDict" in record["line"] and resumes,
        "guard-kill": gone_s < GUARD_BOUND_S and not record["folder_left"]
        and any("standby guard" in line for line in guard_log),
    }[point] and not left and not record["traceback"]
    return record


def damaged(out: Path, estimator: str, point: str) -> dict:
    """``truncated``, ``bit-flip``, ``missing-step``: the run killed once checkpoint 2's manifest
    is written, the checkpoint damaged, ``--resume`` refused before Ray; then the refusal's advice
    (the tracker set to the newest intact checkpoint) followed."""
    process = demo(out, "--save-every", "1", "--estimator", estimator)
    seen: dict[int, int] = {}
    step2 = out / "checkpoints" / "global_step_2"
    if not wait_for(lambda: (step2 / "rfpp-manifest.json").exists(), process, out, seen):
        process.wait(timeout=RUN_LIMIT_S)
        return {"point": point, "reached": False, "output": _demo_output(out)[-2000:]}
    record = {"point": point, "reached": True, **kill(process, out, seen)}
    if point == "missing-step":
        (out / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("99")
        named, intact = "global_step_99 does not exist", "the newest intact checkpoint is step 2"
    else:
        target = max((p for p in (step2 / "actor").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
        data = bytearray(target.read_bytes())
        if point == "truncated":
            data = data[:len(data) // 2]
        else:
            data[len(data) // 2] ^= 0x01
        target.write_bytes(bytes(data))
        named, intact = str(target), "the newest intact checkpoint is step 1"
    (out / "verl.log").rename(out / "verl.killed.log")
    started = time.time()
    code = demo(out, "--resume", "--estimator", estimator).wait(timeout=RUN_LIMIT_S)
    line = _demo_line(_demo_output(out))
    record.update(refusal_exit=code, refusal_s=round(time.time() - started, 3), line=line,
                  ray_started=(out / "verl.log").exists(), checkpoint=tracker(out), lost=[],
                  landed=code == 2 and named in line and intact in line
                  and not (out / "verl.log").exists())
    advice = re.search(r"`echo (\d+) > (\S+)`", line)
    if advice:
        Path(advice[2]).write_text(advice[1])
    return record


def double_resume(out: Path, estimator: str) -> tuple[dict, subprocess.Popen]:
    """The run killed as the tracker says 1; two ``--resume`` 2 s apart: the second's end and line
    (the first is returned, running)."""
    record = kill_at(out, estimator, "checkpoint-1", resumed=False)
    record["point"] = "double-resume"
    if not record["reached"]:
        return record, None
    (out / "trace.txt").unlink(missing_ok=True)
    first = demo(out, "--resume", "--estimator", estimator)
    time.sleep(2.0)
    started = time.time()
    second = demo(out, "--resume", "--estimator", estimator)
    code = second.wait(timeout=RUN_LIMIT_S)
    line = _demo_line(_demo_output(out))
    record.update(second_exit=code, second_s=round(time.time() - started, 3), line=line,
                  landed=code == 2 and f"in use by another run (pid {first.pid}," in line)
    return record, first


def cell(base: Path, estimator: str, point: str, ref: dict) -> dict:
    out = base / f"{estimator}-{point}-{int(time.time())}"
    out.mkdir(parents=True)
    started = time.monotonic()
    kills = []
    if point in FAILED_WRITES:
        try:
            kills.append(failed_write(out, estimator, point))
            if kills[-1]["reached"]:
                return _resumed({"estimator": estimator, "point": point, "kills": kills}, out, estimator, ref,
                                started)
            return {"estimator": estimator, "point": point, "kills": kills,
                    "seconds": round(time.monotonic() - started, 1)}
        finally:
            subprocess.run(["umount", str(out / "checkpoints")], capture_output=True)
    if point in SIGNALLED:
        kills.append(signalled(out, estimator, point))
    elif point in DAMAGED:
        kills.append(damaged(out, estimator, point))
    elif point == "double-resume":
        record, first = double_resume(out, estimator)
        if first is None:
            return {"estimator": estimator, "point": point, "kills": [record]}
        return _resumed({"estimator": estimator, "point": point, "kills": [record]}, out, estimator, ref, started,
                        first)
    elif point == "resume-first-step":
        kills.append(kill_at(out, estimator, "checkpoint-1", resumed=False))
        if kills[-1]["reached"]:
            kills.append(kill_at(out, estimator, "update", resumed=True))
            kills[-1]["point"] = "resume-first-step"
    else:
        kills.append(kill_at(out, estimator, point, resumed=False))
    record = {"estimator": estimator, "point": point, "kills": kills}
    if all(k["reached"] for k in kills):
        return _resumed(record, out, estimator, ref, started)
    record["seconds"] = round(time.monotonic() - started, 1)
    return record


def _resumed(record: dict, out: Path, estimator: str, ref: dict, started: float,
             process: subprocess.Popen = None) -> dict:
    """``record`` with the resume of ``out`` to the end (``process``: one already started),
    compared with the uninterrupted run."""
    if process is None:
        (out / "trace.txt").unlink(missing_ok=True)
        if (out / "verl.log").exists():  # the resume writes its own: the failed run's stays as evidence
            (out / "verl.log").rename(out / "verl.failed.log")
        process = demo(out, "--resume", "--estimator", estimator)
    code = process.wait(timeout=RUN_LIMIT_S)
    text = _first_output(out) if record["point"] == "double-resume" else _demo_output(out)
    record.update(resume_exit=code, digest_same=digest_of(text) == ref["digest"],
                  metrics_same=_read(out / "metrics.jsonl") == ref["metrics"],
                  resumed_steps=re.findall(r"^step (\d+)/", text, re.M), left_after_resume=len(run_processes(out)),
                  seconds=round(time.monotonic() - started, 1))
    return record


def _first_output(out: Path) -> str:
    """``double-resume``: the output of the first of the two resumes (the second-to-last log)."""
    logs = sorted(out.parent.glob(f"{out.name}.*.log"), key=lambda path: int(path.name.rsplit(".", 2)[1]))
    return logs[-2].read_text() if len(logs) > 1 else ""


def metrics_lines(out: Path, ref: dict) -> dict:
    """``out``'s ``metrics.jsonl`` against the uninterrupted run's, by step: the steps whose line is
    identical, those that differ, and those never logged (verl logs a step after writing its
    checkpoint: a kill between the two leaves a step trained, saved and never logged)."""
    def by_step(text: str) -> dict:
        return {json.loads(line)["step"]: line for line in text.splitlines() if line.strip()}
    mine, theirs = by_step(_read(out / "metrics.jsonl")), by_step(ref["metrics"])
    return {"identical": sorted(s for s in mine if theirs.get(s) == mine[s]),
            "differ": sorted(s for s in mine if theirs.get(s) != mine[s]),
            "never_logged": sorted(set(theirs) - set(mine))}


def _steps(steps: list[int]) -> str:
    return f"{steps[0]}-{steps[-1]}" if len(steps) > 1 and steps == list(range(steps[0], steps[-1] + 1)) \
        else ", ".join(map(str, steps))


def table(records: list[dict], base: Path) -> str:
    """One row per (estimator, kill point). ``worker``: "landed" is the demo's own end as it should
    be (exit 1 after checkpoint 1, the one line, no traceback, no process of the run left), and
    "all gone after" the seconds from the worker's kill to the demo's exit. ``disk-full``, ``read-only``: "landed"
    likewise (exit 1, the one line, no traceback, the tracker at 1); "all gone after" is the demo's
    whole run, start to exit."""
    rows = ["| estimator | kill point | runs | landed where named | resumed to the identical weights digest | "
            "metrics.jsonl against the uninterrupted run's | completed steps lost | processes of the run at the "
            "kill | all gone after (s) | tracker moved after the kill | checkpoint files changed after the kill "
            "(latest, s) |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    groups: dict = {}
    for record in records:
        groups.setdefault((record["estimator"], record["point"]), []).append(record)
    for (estimator, point), group in sorted(groups.items(), key=lambda item: (ESTIMATORS.index(item[0][0]),
                                                                            POINTS.index(item[0][1]))):
        kills = [k for r in group for k in r["kills"] if k.get("reached")]
        last = [r["kills"][-1] for r in group if r["kills"][-1].get("reached")]
        refs = {e: json.loads(_read(base / f"ref-{e}" / "reference.json") or "{}") for e in {estimator}}
        lines = []
        for r in group:
            folders = sorted(p for p in base.glob(f"{estimator}-{point}-*") if p.is_dir())
            lines.append(metrics_lines(folders[group.index(r)], refs[estimator]) if len(folders) == len(group)
                         else None)
        survived = sum(bool(r.get("digest_same") and r.get("resume_exit") == 0) for r in group)
        logged = "; ".join("?" if m is None else "identical" if not (m["differ"] or m["never_logged"]) else
                           f"steps {_steps(m['identical'])} identical" + (f", {_steps(m['differ'])} differ"
                                                                           if m["differ"] else "")
                           + (f", step {_steps(m['never_logged'])} never logged" if m["never_logged"] else "")
                           for m in lines)
        gone = [k["gone_s"] for k in kills]
        late = [k["last_file_after_kill_s"] for k in kills if k["last_file_after_kill_s"] is not None]
        rows.append(" | ".join([
            f"| {estimator}", point, str(len(group)), f"{sum(k['landed'] for k in last)}/{len(last)}",
            f"{survived}/{len(group)}", logged, ", ".join(str(len(k["lost"])) for k in last) or "-",
            ", ".join(str(k["alive_at_kill"]) for k in kills) or "-",
            ", ".join(f"{value:.2f}" for value in gone) or "-",
            f"{sum(k['tracker_moved'] for k in kills)} of {len(kills)}",
            f"{sum(k['files_after_kill'] for k in kills)} ({max(late):.2f})" if late else "0 |"]).rstrip(" |") + " |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--estimators", nargs="*", default=list(ESTIMATORS), choices=ESTIMATORS)
    parser.add_argument("--points", nargs="*", default=list(POINTS), choices=POINTS)
    parser.add_argument("--table", action="store_true", help="print the table of OUT/faults.jsonl and exit")
    parser.add_argument("--until", metavar="HH:MM", help="start no run after this time (UTC) of today")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    records_path = args.out / "faults.jsonl"
    done = {(r["estimator"], r["point"]) for r in map(json.loads, _read(records_path).splitlines())}
    if not args.table:
        for estimator in args.estimators:
            if args.until and time.strftime("%H:%M", time.gmtime()) >= args.until:
                break
            ref = reference(args.out, estimator)
            print(f"{estimator}: uninterrupted run {ref['seconds']} s, digest {ref['digest'][:16]}", flush=True)
            for point in args.points:
                if args.until and time.strftime("%H:%M", time.gmtime()) >= args.until:
                    print(f"{estimator} {point}: not run (--until {args.until})", flush=True)
                    continue
                if (estimator, point) in done:  # a second command continues the matrix of OUT
                    print(f"{estimator} {point}: in {records_path} already (remove its line to run it again)",
                          flush=True)
                    continue
                record = cell(args.out, estimator, point, ref)
                with open(records_path, "a") as file:
                    file.write(json.dumps(record) + "\n")
                print(json.dumps(record), flush=True)
    records = [json.loads(line) for line in _read(records_path).splitlines()]
    print(table(records, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
