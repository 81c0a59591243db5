"""Nothing of a run outlives its launcher (Linux: it reads ``/proc``).

``Guard`` (in the launcher) starts this file as a script (``python -I``: the standard library only,
no import of verl) in a session of its own, its stdin a pipe whose write end only the launcher
holds, and tells it what belongs to the run: ``session SID`` (the trainer's session: verl's driver
and the Ray processes it starts), ``pid PID`` (a process started otherwise, e.g. a local Ray
cluster's node) and ``folder PATH`` (a temporary folder of the run's, e.g. Ray's). End of file on
the pipe means the launcher ended, however: it closed the pipe, or
it was killed and the kernel closed it. The guard then stops (SIGSTOP: none can fork, train or
write a file while they are gathered) and kills (SIGKILL) every process of those sessions, those
pids and all their descendants, until none is left, removes the run's folders (once no process of
the run is left to write into them), and appends one line to its log: when the launcher ended, how
many processes it killed, how long they took to go, how many folders it removed.

Two guards run, a primary and a standby, each told everything by the launcher and each holding the
read end of a pipe only the other writes to: no single point of cleanup. When the launcher ends the
primary reaps and tells the standby ``done``; a standby that hears its peer's pipe end instead (the
primary was killed, before or with the launcher) reaps itself. A guard that sees its peer end while
the launcher lives records it in the log; the run goes on, guarded by the one left.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

REAP_LIMIT_S = 30.0  # the guard gives up waiting for the processes to go after this long
PRIMARY, STANDBY = "primary", "standby"  # two guards, each watching the launcher and the other: no single point
PEER = {PRIMARY: STANDBY, STANDBY: PRIMARY}


def _stat(pid: int) -> Optional[tuple[int, int, int, str]]:
    """``(ppid, session, start time, state)`` of ``pid`` from ``/proc``, or ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            data = file.read()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return int(fields[1]), int(fields[3]), int(fields[19]), fields[0]


def _table() -> dict[int, tuple[int, int, int, str]]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            found = _stat(int(name))
            if found:
                table[int(name)] = found
    return table


def members(sessions: set[int], roots: dict[int, int]) -> set[int]:
    """The live processes of the run: those of ``sessions``, the ``roots`` (``{pid: start time}``,
    so a reused pid is not taken) and every descendant of theirs; zombies (dead already) left out."""
    table = _table()
    chosen = {pid for pid, (_, sid, _, _) in table.items() if sid in sessions}
    chosen |= {pid for pid, start in roots.items() if pid in table and table[pid][2] == start}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    stack = list(chosen)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in chosen:
                chosen.add(child)
                stack.append(child)
    chosen.discard(os.getpid())
    return {pid for pid in chosen if table[pid][3] != "Z"}


def _signal(pids: set[int], number: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, number)
        except OSError:
            pass


def reap(sessions: set[int], roots: dict[int, int], limit_s: float = REAP_LIMIT_S) -> tuple[int, float, int]:
    """Stop, then kill, every process of the run until none is left (or ``limit_s`` passed):
    ``(processes killed, seconds until none was left, processes still alive)``."""
    started = time.monotonic()
    killed: set[int] = set()
    while time.monotonic() - started < limit_s:
        found = members(sessions, roots)
        if not found:
            return len(killed), time.monotonic() - started, 0
        stopped: set[int] = set()
        while found - stopped:  # their parents are stopped, so the tree holds still while it is read
            _signal(found - stopped, signal.SIGSTOP)
            stopped |= found
            found = members(sessions, roots)
        _signal(stopped, signal.SIGKILL)
        killed |= stopped
        time.sleep(0.02)
    return len(killed), time.monotonic() - started, len(members(sessions, roots))


def _log(log_path: str, line: str) -> None:
    with open(log_path, "a") as log:
        log.write(line + "\n")


def watch(log_path: str, role: str = PRIMARY, peer_in: int = -1, peer_out: int = -1) -> None:
    """One guard (``role``: ``PRIMARY`` or ``STANDBY``): read what belongs to the run from stdin
    until end of file (the launcher ended), then the primary reaps, writes its line and tells its
    peer ``done`` (on ``peer_out``); the standby waits for that word (on ``peer_in``) and reaps
    only if it does not come (the primary ended first: killed). Either records in the log a peer
    that ended while the launcher lived."""
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the launcher, which then closes the pipe
    sessions: set[int] = set()
    roots: dict[int, int] = {}
    folders: list[str] = []
    peer = {"pid": "?", "word": None, "ending": False}
    heard = threading.Event()

    def listen() -> None:  # the peer's one word, or the end of its pipe: it ended
        with os.fdopen(peer_in, "r") as pipe:
            peer["word"] = pipe.readline().strip() or "ended"
        heard.set()
        if peer["word"] != "done" and not peer["ending"]:
            _log(log_path, f"the {PEER[role]} guard (pid {peer['pid']}) ended at {time.time():.3f} while the run "
                           f"went on (killed?); the {role} guard (pid {os.getpid()}) still guards it")

    if peer_in >= 0:
        threading.Thread(target=listen, daemon=True).start()
    for line in sys.stdin:
        kind, _, number = line.partition(" ")
        if kind == "session":
            sessions.add(int(number))
        elif kind == "pid" and _stat(int(number)):
            roots[int(number)] = _stat(int(number))[2]
        elif kind == "folder":
            folders.append(number.rstrip("\n"))
        elif kind == "peer":
            peer["pid"] = number.strip()
    peer["ending"] = True
    ended = time.time()
    if role == STANDBY and peer_in >= 0:
        heard.wait()
        if peer["word"] == "done":
            return
    killed, seconds, left = reap(sessions, roots)
    outcome = f"none left after {seconds:.3f} s" if not left else f"{left} still alive after {seconds:.3f} s"
    present = [folder for folder in folders if os.path.isdir(folder)]
    if not left:  # a process still alive may be writing there: its folders stay, and the line says so
        for folder in present:
            shutil.rmtree(folder, ignore_errors=True)
    removed = sum(not os.path.exists(folder) for folder in present)
    by = "" if role == PRIMARY else f" (by the standby guard, pid {os.getpid()}: the primary had ended)"
    _log(log_path, f"launcher ended at {ended:.3f}; killed {killed} processes of the run, {outcome}; "
                   f"removed {removed} of the {len(present)} folders of the run still there{by}")
    if peer_out >= 0:
        try:
            os.write(peer_out, b"done\n")
        except OSError:
            pass


IDLE = "ray::IDLE"  # the title of a Ray worker with no actor and no task (Ray may end it at any time)
RAY_AGENTS = ("ray::RuntimeEnvAgent", "ray::DashboardAgent")  # a node's agents, not workers: Ray ends them with
#                                                              the node (a Ray start that timed out, a shutdown)
RAY_NODE = ("raylet", "gcs_server")  # a node's manager and Ray's control store (executables, not ``ray::`` titles):
#                                      their end ends every worker of the node


def title(pid: int) -> Optional[str]:
    """The first word of ``pid``'s command line (a Ray worker's process title:
    ``ray::WorkerDict.update_actor``), ``""`` if it has none, ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            words = file.read().replace(b"\0", b" ").split()
    except OSError:
        return None
    return words[0].decode(errors="replace") if words else ""


class WorkerWatch:
    """The Ray workers of session ``sid`` that hold an actor or a task (title ``ray::Name...``,
    not ``IDLE`` nor one of ``RAY_AGENTS``), and its raylet and GCS (``RAY_NODE``, by the name of
    their executable): ``poll()`` returns ``[(pid, title), ...]`` of those
    seen gone since the last poll (ended, a zombie, or its pid reused; several at once when Ray
    ends actors with the one that died). The session is read every ``rescan_s`` (new workers);
    the watched pids every poll (a few ``/proc`` reads). A worker seen back to ``IDLE`` is dropped
    (Ray ends idle workers when it likes)."""

    def __init__(self, sid: int, rescan_s: float = 3.0):
        self.sid = sid
        self.rescan_s = rescan_s
        self.watched: dict[int, tuple[int, str]] = {}  # pid -> (start time, title without the method)
        self._scanned = float("-inf")

    def _see(self, pid: int, start: int) -> bool:
        """Record ``pid``'s current title; ``False`` if it is gone or ending (no command line: the
        kernel releases it before the process is a zombie), ``True`` otherwise (an idle worker or
        one not Ray's is dropped, not gone)."""
        name = title(pid)
        if name and name.rsplit("/", 1)[-1] in RAY_NODE:
            self.watched[pid] = (start, name.rsplit("/", 1)[-1])
            return True
        if not name or name == IDLE or name in RAY_AGENTS or not name.startswith("ray::"):
            self.watched.pop(pid, None)
            return bool(name)
        self.watched[pid] = (start, name.split(".", 1)[0])
        return True

    def poll(self) -> list[tuple[int, str]]:
        gone = []
        for pid, (start, name) in list(self.watched.items()):
            found = _stat(pid)
            if found is None or found[2] != start or found[3] in "ZX" or not self._see(pid, start):
                gone.append((pid, name))
                self.watched.pop(pid, None)
        if gone:
            return gone
        if time.monotonic() - self._scanned >= self.rescan_s:
            self._scanned = time.monotonic()
            for pid in members({self.sid}, {}) - set(self.watched):
                found = _stat(pid)
                if found:
                    self._see(pid, found[2])
        return []


class Guard:
    """The launcher's side: ``with Guard(log) as guard: guard.session(pid)`` (the pipes close on
    leaving the block, or when the launcher dies; either way the run's processes are killed).
    Two guards are started, a primary and a standby, each told everything and each holding a pipe
    from the other: killed together with the launcher, either one still reaps the run."""

    def __init__(self, log_path: Path):
        self.log_path = Path(log_path)
        self.processes: list[subprocess.Popen] = []

    @property
    def process(self) -> Optional[subprocess.Popen]:
        """The primary guard."""
        return self.processes[0] if self.processes else None

    def __enter__(self) -> Guard:
        to_standby, from_primary = os.pipe()[::-1]  # (write end, read end)
        to_primary, from_standby = os.pipe()[::-1]
        ends = {PRIMARY: (from_standby, to_standby), STANDBY: (from_primary, to_primary)}
        try:
            for role in (PRIMARY, STANDBY):
                peer_in, peer_out = ends[role]
                self.processes.append(subprocess.Popen(
                    [sys.executable, "-I", __file__, str(self.log_path), role, str(peer_in), str(peer_out)],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
                    start_new_session=True, pass_fds=(peer_in, peer_out)))
        finally:
            for fd in (to_standby, from_primary, to_primary, from_standby):
                os.close(fd)
        primary, standby = self.processes
        self._tell_one(primary, "peer", standby.pid)
        self._tell_one(standby, "peer", primary.pid)
        return self

    @staticmethod
    def _tell_one(process: subprocess.Popen, kind: str, what: object) -> None:
        assert process.stdin is not None
        try:
            process.stdin.write(f"{kind} {what}\n")
            process.stdin.flush()
        except OSError:  # that guard was killed: the other one guards the run (and logged its end)
            pass

    def _tell(self, kind: str, what: object) -> None:
        for process in self.processes:
            self._tell_one(process, kind, what)

    def session(self, sid: int) -> None:
        """Every process of session ``sid`` (and its descendants) belongs to the run."""
        self._tell("session", sid)

    def pid(self, pid: int) -> None:
        """Process ``pid`` and its descendants belong to the run."""
        self._tell("pid", pid)

    def folder(self, path: str) -> None:
        """The folder ``path`` is the run's: removed once none of its processes is left."""
        if "\n" in path:
            raise ValueError(f"a folder whose name holds a line break: {path!r}")
        self._tell("folder", path)

    def __exit__(self, *exc_info: object) -> None:
        """Close the pipes and wait for the guards to have killed what was left of the run."""
        for process in self.processes:
            try:
                process.stdin.close()
            except OSError:
                pass
        for process in self.processes:
            try:
                process.wait(timeout=REAP_LIMIT_S + 10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    watch(sys.argv[1], *sys.argv[2:3], *map(int, sys.argv[3:5]))
