"""Run verl's real ``main_ppo`` on the CPU and supervise it until it ends: the trainer in a session
of its own that nothing outlives (``guard``, the kernel's parent-death signal), the Ray workers
that end while verl trains (``WorkerDeath``, ``WORKER_GRACE_S``), a run without progress
(``STALL_S``), the timeout, and what the run showed (``RunResult``). What the run is (its
overrides and environment) is ``verl_rfpp.cpu.configuration``; its folder across runs
(checkpoints, resume) ``verl_rfpp.cpu.checkpoints``; its metrics files ``verl_rfpp.cpu.run_metrics``."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from verl_rfpp.cpu import cluster, guard, trace
from verl_rfpp.cpu.checkpoints import Manifests, saved_step
from verl_rfpp.cpu.configuration import command, trainer_environment
from verl_rfpp.cpu.run_metrics import parse_step_line, weight_digests, write_metrics

GUARD_LOG = "guard.log"  # when the launcher ended and what of the run was killed then (``guard``)


PR_SET_PDEATHSIG = 1  # prctl(2): the signal the kernel sends a process when its parent ends
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _die_with(parent: int) -> Optional[Callable[[], None]]:
    """Run in the trainer before verl starts: the kernel kills it (SIGKILL) the moment the launcher
    (``parent``) ends, however it ends (Linux's ``PR_SET_PDEATHSIG``), so verl's driver cannot
    record another checkpoint; ``guard`` kills the rest of the run. ``None`` off Linux."""
    if _LIBC is None:
        return None

    def arm() -> None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the launcher ended before the call
            os._exit(1)
    return arm


WORKER_GRACE_S = 20.0  # after a worker of the run ended, verl's trainer has this long to stop by itself
WATCH_S = 0.25  # how often the launcher looks at the run's workers
# No progress (a new step line, trace line or checkpoint) for this long, once the workers are up
# (the run trace's first line), and the run is stopped naming the stalled process: the longest gap
# measured between two of them is STALL_MEASURED_S (docs/cpu-backend.md, "A hung worker").
STALL_S = 300.0


@dataclass
class WorkerDeath:
    """A Ray process of the run (an actor's or a task's worker, or the node's raylet or GCS) that
    ended while verl trained, or (``stalled``) one the run waited on with no progress for
    ``STALL_S``: its title (``ray::WorkerDict``) and pid, the last step verl had logged or
    checkpointed when it was seen (0: none), whether verl stopped by itself
    within ``WORKER_GRACE_S`` (else the launcher stopped the run), and the seconds from the death
    seen to the end of the run (every process of it gone: ``run`` returned)."""

    pid: int
    title: str
    after_step: int
    seen: float  # time.monotonic()
    stopped_by_launcher: bool = False
    seconds: float = 0.0
    with_it: list = field(default_factory=list)  # (pid, title) of the workers seen gone in the same look
    stalled: str = ""  # for a hung run: how the process was found (``stopped (SIGSTOP)``, ``busy in its task``)


# Ray's errors for a call on an actor or a task whose worker process ended
DEATH_ERRORS = ("ActorDiedError", "RayActorError", "WorkerCrashedError", "ActorUnavailableError", "NodeDiedError",
                "OwnerDiedError", "ObjectLostError")  # Ray's words that a process of the run is gone


def _driver_failed(log: Sequence[str]) -> bool:
    """verl's driver reported an error of its own (not Ray's word that a worker died; an actor's
    lines, prefixed ``(Name pid=N)``, aside): workers that end after it are its shutdown, not the cause."""
    return (any(line.startswith(("Traceback", "Error executing job")) for line in log)
            and not any(name in line for line in log for name in DEATH_ERRORS))


def _death_in_log(log: Sequence[str], after_step: int) -> Optional[WorkerDeath]:
    """The worker Ray's error in verl's driver names (``ActorDiedError: ...``, then ``class_name:``
    and ``pid:`` lines), for a death the watch did not see (verl stopped first, or the worker ran
    outside the trainer's session: a multi-node run's)."""
    text = "".join(line for line in log if not re.sub(r"\x1b\[[0-9;]*m", "", line).startswith("("))
    match = re.search(rf"(?:{'|'.join(DEATH_ERRORS)})\b.*?class_name: ([\w.<>]+)\s.*?pid: (\d+)", text, re.S)
    if not match:
        return None
    return WorkerDeath(int(match[2]), "ray::" + match[1].rsplit(".", 1)[-1], after_step, time.monotonic())


def _name_death(result: RunResult, last_step: int) -> None:
    """After the trainer ended: a death the watch saw is no death when verl's driver failed on an
    error of its own (``_driver_failed``: its shutdown ended the worker, and on a loaded machine the
    watch can see that before the driver's error reaches the launcher); a death the watch did not
    see is taken from Ray's error in verl's log (``_death_in_log``); when Ray's error names a
    worker, that one died, whatever the watch saw end first (those Ray ended with it: a 2-rank
    run's ``TransferQueueController``; or, on a loaded machine, verl's ``TaskRunnerV1`` ending on
    the error before the watch looked at the dead worker). A death of the node's raylet or GCS seen
    by the watch stays theirs (the workers, and Ray's errors, follow it), and so does a stall."""
    named = _death_in_log(result.log, last_step) if result.returncode != 0 else None
    if result.death and (result.death.title in guard.RAY_NODE or result.death.stalled):
        return  # a raylet's or GCS's death ends every worker (Ray's errors then name one); a stall is no death
    if result.death and not result.death.stopped_by_launcher and named is None and _driver_failed(result.log):
        result.death = None  # verl's driver failed on an error of its own (a checkpoint it could not write): the
        #                      worker the watch saw end before that error reached this process was its shutdown
    elif result.death is None and not result.timed_out:
        result.death = named
    elif result.death and named and named.pid != result.death.pid:
        result.death.with_it = [(p, t) for p, t in result.death.with_it if p != named.pid]
        result.death.with_it.append((result.death.pid, result.death.title))
        result.death.pid, result.death.title = named.pid, named.title


def _last_step(result: RunResult, out_dir: Path) -> int:
    """The last step of the run logged or checkpointed (a step's checkpoint and weight sync come
    before its console line); 0 before the first."""
    return max(max(result.steps, default=0), saved_step(out_dir) or 0)


def _stalled(sid: int) -> tuple[int, str, str]:
    """The process of session ``sid`` a run with no progress waits on: a Ray process stopped
    (``T``: SIGSTOP, a debugger), else a Ray worker busy in a task (its title names the method:
    ``ray::WorkerDict.update_actor``), else verl's driver: ``(pid, title, how)``."""
    found = {pid: (guard.title(pid) or "", guard._stat(pid)) for pid in guard.members({sid}, {})}
    ray = {pid: (name, stat) for pid, (name, stat) in found.items() if stat and name.startswith("ray::")
           and name != guard.IDLE and name not in guard.RAY_AGENTS}
    stopped = sorted(pid for pid, (_, stat) in ray.items() if stat[3] in "Tt")
    if stopped:
        return stopped[0], ray[stopped[0]][0].split(".", 1)[0], "stopped (state T: SIGSTOP or a debugger)"
    busy = sorted(pid for pid, (name, _) in ray.items() if "." in name and not name.startswith("ray::TaskRunner"))
    if busy:
        return busy[0], ray[busy[0]][0], "in a task that does not return"
    return sid, "verl's driver (main_ppo)", "waiting, no Ray worker stopped or busy"


def _progress(result: RunResult, out_dir: Path, trace_path: Path) -> tuple:
    """What moves while verl trains: the steps logged, the run trace's size (several lines a step:
    advantages, every policy-loss call, every weight sync) and verl's tracker."""
    try:
        size = trace_path.stat().st_size
    except OSError:
        size = 0
    return len(result.steps), size, saved_step(out_dir)


def _watch_workers(process: subprocess.Popen, result: RunResult, steps: int, out_dir: Path,
                   trace_path: Optional[Path] = None, manifests: Optional[Manifests] = None,
                   stall_s: float = STALL_S) -> None:
    """Until the trainer ends: the first Ray worker of its session (or its raylet or GCS) that ends
    before the last step was logged (and before verl's driver reported an error) is ``result.death``;
    verl then has ``WORKER_GRACE_S`` to stop, after which every process of the session is killed (a
    driver left waiting on a dead actor, or a rank on a dead peer, would wait for ever). Once the
    workers are up (the trace's first line), a run without progress (``_progress``) for ``stall_s``
    is stalled: the process it waits on (``_stalled``) is ``result.death`` and the run is killed.
    Each checkpoint verl records gets its manifest (``manifests``)."""
    workers = guard.WorkerWatch(process.pid)
    trace_path = trace_path or Path(out_dir) / trace.TRACE_FILE
    manifests = manifests or Manifests(out_dir)
    last, changed = _progress(result, out_dir, trace_path), time.monotonic()
    while process.poll() is None:
        manifests.poll()
        gone = workers.poll()
        if gone and max(result.steps, default=0) < steps and not _driver_failed(result.log):
            gone.sort(key=lambda worker: worker[1] not in guard.RAY_NODE)  # the raylet's end takes its workers
            (pid, title), *others = gone
            result.death = WorkerDeath(pid, title, _last_step(result, out_dir), time.monotonic(), with_it=others)
            while process.poll() is None and time.monotonic() - result.death.seen < WORKER_GRACE_S:
                time.sleep(0.1)
            if process.poll() is None:
                result.death.stopped_by_launcher = True
                guard.reap({process.pid}, {})
            return
        now, progress = time.monotonic(), _progress(result, out_dir, trace_path)
        if progress != last or not progress[1]:
            last, changed = progress, now
        elif now - changed >= stall_s and max(result.steps, default=0) < steps:
            pid, title, how = _stalled(process.pid)
            result.death = WorkerDeath(pid, title, _last_step(result, out_dir), now, stopped_by_launcher=True,
                                       stalled=f"{how}; the run made no progress for {now - changed:.0f} s")
            guard.reap({process.pid}, {})
            return
        time.sleep(WATCH_S)


@dataclass
class RunResult:
    """What one CPU run of verl showed: exit code, per-step metrics, the trace, the driver pid."""

    returncode: int
    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    trace: list[str] = field(default_factory=list)
    driver_pids: set[int] = field(default_factory=set)
    log: list[str] = field(default_factory=list)
    log_path: Optional[Path] = None
    seconds: float = 0.0
    timed_out: bool = False
    nodes: list = field(default_factory=list)  # cluster.NodeInfo of each Ray node (multi-node runs)
    node_of_pid: dict[int, str] = field(default_factory=dict)  # every actor's pid -> its Ray node id
    digests: dict[int, str] = field(default_factory=dict)  # trainer step -> sha256 of the weights after it
    metrics: dict[int, dict] = field(default_factory=dict)  # step -> metrics.jsonl's line (full precision)
    death: Optional[WorkerDeath] = None  # a Ray worker of the run that ended while verl trained
    planned_steps: int = 0  # the run's --steps (a resumed run's: its last step)
    save_every: Optional[int] = None

    @property
    def digest(self) -> str:
        """sha256 of the actor's weights after the last step ('' if no server received any)."""
        return self.digests[max(self.digests)] if self.digests else ""

    def read_step(self, line: str) -> Optional[tuple[int, dict[str, float]]]:
        """One line of verl's output: a step's metrics line is recorded (its metrics, and the pid of
        the driver that printed it) and returned as ``(step, metrics)``; any other line gives ``None``."""
        parsed = parse_step_line(line)
        if parsed:
            self.steps[parsed[0]] = parsed[1]
            driver = re.search(r"\((TaskRunner\w*) pid=(\d+)\)", line)
            if driver:
                self.driver_pids.add(int(driver.group(2)))
        return parsed


def run(estimator: str, out_dir: Path, steps: int = 2, legacy: bool = False, echo: bool = True,
        timeout: float = 900, ranks: int = 1, seed: int = 0, ours: bool = True,
        loggers: tuple[str, ...] = ("console",), assets_dir: Optional[Path] = None, multi_turn: bool = False,
        on_step: Optional[Callable[[int, dict[str, float]], None]] = None, nodes: int = 1,
        node_env: Optional[dict[int, dict[str, str]]] = None, extra_overrides: Sequence[str] = (),
        extra_env: Optional[dict[str, str]] = None, save_every: Optional[int] = None, resume: bool = False,
        example: Sequence[str] = (), stall_s: float = STALL_S) -> RunResult:
    """Run verl's ``main_ppo`` on the CPU; its whole log goes to ``out_dir/verl.log`` (and to stdout
    with ``echo``); ``on_step(step, metrics)`` is called as each step's console line arrives.
    One node: verl starts its Ray with ``RAY_TMPDIR`` a temporary directory of the run's own.
    ``nodes > 1``: on a ``cluster.LocalCluster`` of that many nodes (one rank each, ``node_env[i]``
    added to node ``i``'s environment), started before verl and stopped after it, whatever happens.
    Every step's metrics end in ``out_dir/metrics.jsonl`` and ``timing.jsonl`` (``write_metrics``).
    Nothing of the run outlives the calling process (``guard``: killed, however it ends; its line
    in ``out_dir/guard.log``). A Ray worker of the run that ends while verl trains is
    ``result.death``; verl has ``WORKER_GRACE_S`` to stop, then the run is killed (``_watch_workers``);
    a run without progress for ``stall_s`` once its workers are up is killed too, the process it
    waits on its ``result.death``. Each checkpoint verl records gets its manifest (``Manifests``)."""
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    with guard.Guard(out_dir / GUARD_LOG) as watch:
        if nodes == 1:
            # Ray's files (its sessions, the address file `ray status` and `auto` read) go to a directory of
            # the run's own, removed after it, not to the machine's shared /tmp/ray (under /tmp: Ray's socket
            # paths are short)
            with tempfile.TemporaryDirectory(prefix="rfpp-ray-", dir="/tmp", ignore_cleanup_errors=True) as ray_tmp:
                os.makedirs(os.path.join(ray_tmp, "ray"))
                watch.folder(ray_tmp)  # removed by the guard if this process dies before the block's end
                result = _run(watch, estimator, out_dir, steps, legacy, echo, timeout, ranks, seed, ours, loggers,
                              assets_dir, multi_turn, on_step, extra_overrides=extra_overrides,
                              extra_env={"RAY_TMPDIR": ray_tmp, **(extra_env or {})}, save_every=save_every,
                              resume=resume, stall_s=stall_s)
        else:
            env = trainer_environment(Path(out_dir).resolve(), ours)
            changed = {key: value for key, value in env.items() if os.environ.get(key) != value}
            with cluster.LocalCluster(nodes=nodes, num_cpus=8, num_gpus=1, env=changed,
                                      node_env=node_env) as ray_cluster:
                for pid in ray_cluster.processes():
                    watch.pid(pid)
                watch.folder(ray_cluster.temp_dir)
                result = _run(watch, estimator, out_dir, steps, legacy, echo, timeout, nodes, seed, ours, loggers,
                              assets_dir, multi_turn, on_step, nodes, ray_cluster.address, extra_overrides,
                              extra_env, save_every, resume, example, stall_s)
                result.nodes, result.node_of_pid = ray_cluster.nodes(), ray_cluster.node_of_pids()
    if result.death is not None:  # the guard has killed what was left of the run
        result.death.seconds = time.monotonic() - result.death.seen
    return result


def _run(watch, estimator, out_dir, steps, legacy, echo, timeout, ranks, seed, ours, loggers, assets_dir, multi_turn,
         on_step, nodes=1, address=None, extra_overrides=(), extra_env=None, save_every=None, resume=False,
         example=(), stall_s=STALL_S) -> RunResult:
    out_dir = Path(out_dir).resolve()
    argv, env = command(estimator, out_dir, steps, legacy, ranks, seed, ours, loggers, assets_dir, multi_turn,
                        nodes, address, extra_overrides, extra_env, save_every, resume, example)
    trace_path = Path(env[trace.TRACE_ENV])
    trace_path.unlink(missing_ok=True)
    if resume:  # the steps of a run killed before it split its metrics (write_metrics) are kept
        write_metrics(out_dir, resumed=True)
    Path(env["VERL_FILE_LOGGER_PATH"]).unlink(missing_ok=True)
    result = RunResult(returncode=-1, log_path=out_dir / "verl.log", planned_steps=steps, save_every=save_every)
    started = time.monotonic()
    # A session of its own: the guard kills it (and what it started elsewhere) when this process ends.
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               cwd=out_dir, bufsize=1, start_new_session=True, preexec_fn=_die_with(os.getpid()))
    watch.session(process.pid)
    # The watchdog fires even when a hung trainer prints nothing (a deadline checked per line would not).
    def kill() -> None:
        result.timed_out = True
        os.killpg(process.pid, signal.SIGKILL)

    watchdog = threading.Timer(timeout, kill)
    watchdog.start()
    manifests = Manifests(out_dir)
    if resume:  # the checkpoint it starts from was verified (resume_problem), not described again
        manifests.done.add(saved_step(out_dir))
    if echo:
        print(f"verl-rfpp: a run with no progress (a step, a line of {trace_path.name}, a checkpoint) for "
              f"{stall_s:.0f} s once its workers are up is stopped, naming the process it waits on; a run "
              f"still going after {timeout:.0f} s is stopped", flush=True)
    watcher = threading.Thread(target=_watch_workers, args=(process, result, steps, out_dir, trace_path, manifests,
                                                            stall_s), daemon=True)
    watcher.start()
    assert process.stdout is not None
    try:
        with open(result.log_path, "w", buffering=1) as log_file:
            log_file.write("$ " + " ".join(argv) + "\n")
            for line in process.stdout:
                result.log.append(line)
                log_file.write(line)
                if echo:
                    sys.stdout.write(line)
                parsed = result.read_step(line)
                if parsed and on_step:
                    on_step(*parsed)
        result.returncode = process.wait()
        watcher.join()  # its last look: a death or a stall it records is the run's
        manifests.poll()  # a checkpoint recorded in the run's last moments
        _name_death(result, _last_step(result, out_dir))
    finally:  # Ctrl-C or any error here: the trainer and the Ray processes it started go too
        watchdog.cancel()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    result.seconds = time.monotonic() - started
    if trace_path.exists():
        result.trace = trace_path.read_text().splitlines()
    result.digests = weight_digests(result.trace)
    result.metrics = write_metrics(out_dir, resume)
    return result
