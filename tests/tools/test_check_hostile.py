"""``verl-rfpp check SCRIPT`` reads a script and never runs it (issue 29; docs/contract.md section
6.5). Each hostile script of tests/tools/scripts/hostile/ acts in one way a launch script can (deletes,
downloads, installs, traps, detaches, activates a venv, calls an interpreter of its own, evaluates
code); it is checked from a directory of witnesses and the test asserts the verdict and that
nothing happened: the directory's files, sizes and mtimes are as before (no ``outputs/``, no
marker of a fake interpreter or venv), the HTTP server on 127.0.0.1 the scripts reach through
``WITNESS_URL`` got no request, check started no program but its own Python, and no process
carrying the test's token in its environment is left. Where the verdict is a choice of the reader
(an ``exec``, a ``source``, an ``eval``), the case allows exit 0 or exit 2 naming the line. The
in-process cases are in the two-minute tier, where tests/conftest.py also fails any process start."""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.checking import check

pytestmark = pytest.mark.usefixtures("cached_composition")  # tests/conftest.py: the tier's cached composition

HOSTILE = Path(__file__).resolve().parent / "scripts" / "hostile"
TOKEN = "VERL_RFPP_HOSTILE_TOKEN"  # set for check: every process the script starts inherits it
PAST = 1_000_000_000  # the witnesses' mtime (2001): any write moves it
MARKERS = ("activated.marker", "interpreter-ran.marker")
OK = r"(?m)^OK: .*reinforce_plus_plus_baseline"
BOUND_S = 120  # a check returns well within this, busy machine and all (setsid_sleep.sh would hold it 200 s)


@dataclass(frozen=True)
class Case:
    """``codes``: the exit statuses allowed; ``says``: patterns the output matches; ``lines``: text
    on the lines an exit 2 may name (as ``SCRIPT:LINE``); ``if_ok``: patterns an exit 0 matches;
    ``never``: patterns the output must not match."""

    script: str
    arguments: tuple[str, ...] = ()
    codes: tuple[int, ...] = (0,)
    says: tuple[str, ...] = (OK,)
    lines: tuple[str, ...] = ()
    if_ok: tuple[str, ...] = ()
    never: tuple[str, ...] = ()


def _maybe(script: str, *lines: str, if_ok: tuple[str, ...] = (OK,)) -> Case:
    """A construct the reader may read (exit 0) or refuse to read (exit 2 naming one of ``lines``)."""
    return Case(script, codes=(0, 2), says=(), lines=lines, if_ok=if_ok)


RUN_HEADERS = (r"(?m)^run 1 of 2 \((.*/)?{name}:{line}\)", r"(?m)^run 2 of 2 \((.*/)?{name}:{line}\)", r"\[6\.2\.1\]")
CASES = [
    Case("rm_witness.sh"),
    Case("touch.sh"),
    Case("pip_install.sh"),
    Case("curl_wget.sh"),
    Case("git_clone.sh"),
    Case("hf_download.sh"),
    Case("wandb_login.sh"),
    Case("tee_log.sh"),
    Case("redirect_log.sh"),
    Case("trap_exit.sh"),
    Case("trap_term.sh", never=(r"run \d+ of",)),
    Case("setsid_sleep.sh"),
    Case("path_prepend.sh"),
    Case("absolute_interpreter.sh"),
    Case("python3_11.sh"),
    Case("echo_mention.sh", never=(r"run \d+ of",)),
    _maybe("setsid_main_ppo.sh", "setsid"),
    _maybe("exec.sh", "exec"),
    _maybe("venv_activate.sh", "source"),
    _maybe("eval.sh", 'eval "'),
    _maybe("process_substitution.sh", "< <("),
    _maybe("command_substitution.sh", "STAMP=", "OWNER=", "experiment_name", if_ok=(OK, r"(?m)^assumed: ")),
    Case("npu_probe.sh", says=(OK, r"(?m)^assumed: .*(torch_npu|GPU|gpu)"), never=(r"\[6\.2\.4\]",)),
    Case("reads_arguments.sh"),
    Case("reads_arguments.sh", ("1",), codes=(1,), says=(r"\[6\.2\.1\] actor_rollout_ref\.rollout\.n = 1",)),
    Case("reads_arguments.sh", ("8", "sglang")),
    Case("checks_arguments.sh", ("/models/qwen",)),
    Case("checks_arguments.sh", ("/models/qwen", "extra"), codes=(2,), says=()),
    Case("script_options.sh", ("--model", "/models/qwen")),
    Case("arguments_not_last.sh", ("actor_rollout_ref.actor.kl_loss_coef=0.005",),
         says=(OK, r"k2 loss, coefficient 0\.005\b")),
    Case("for_loop.sh", codes=(1,), says=RUN_HEADERS, lines=("main_ppo",)),
    Case("and_and.sh", codes=(1,), says=RUN_HEADERS, lines=("main_ppo",)),
]


def _line(script: Path, text: str) -> int:
    """The number of the first line of ``script`` holding ``text`` outside a comment."""
    return next(number for number, line in enumerate(script.read_text().splitlines(), 1)
                if text in line and not line.lstrip().startswith("#"))


class _Counting(http.server.BaseHTTPRequestHandler):
    def _answer(self):
        self.server.requests.append(f"{self.command} {self.path}")
        self.send_error(404)

    do_GET = do_HEAD = do_POST = do_PUT = _answer

    def log_message(self, *_):
        pass


@pytest.fixture
def server():
    """An HTTP server on 127.0.0.1 that answers 404 and counts requests (``.requests``)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def _witnesses(tree: Path) -> None:
    """A run directory as a user has it: a file, an existing log, a checkpoint, a home, a venv
    whose ``activate`` and interpreters leave a marker, and a ``python3.11`` that does too (first
    on the test's PATH)."""
    (tree / "witness.txt").write_text("kept\n")
    (tree / "train.log").write_text("step 1: loss 0.5\n")
    (tree / "checkpoints" / "global_step_10").mkdir(parents=True)
    (tree / "checkpoints" / "global_step_10" / "model.pt").write_bytes(b"\0" * 64)
    (tree / "home").mkdir()
    ran = f"#!/bin/sh\ntouch {tree / 'interpreter-ran.marker'}\n"
    for name in ("python", "python3"):
        _executable(tree / "venv" / "bin" / name, ran)
    _executable(tree / "bin" / "python3.11", ran)
    (tree / "venv" / "bin" / "activate").write_text(
        f'touch {tree / "activated.marker"}\nexport PATH="{tree / "venv" / "bin"}:$PATH"\n')


def _age(tree: Path) -> None:
    for directory, _, files in os.walk(tree, topdown=False):
        for name in files:
            os.utime(Path(directory) / name, ns=(PAST, PAST), follow_symlinks=False)
        os.utime(directory, ns=(PAST, PAST))


def _snapshot(tree: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under ``tree`` (links not followed): its mode, size and mtime."""
    state = {}
    for directory, directories, files in os.walk(tree):
        for name in [".", *directories, *files]:
            path = Path(directory) / name
            info = path.lstat()
            state[str(path.relative_to(tree))] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return state


def _changes(before: dict, after: dict) -> list[str]:
    return ([f"created {name}" for name in sorted(after.keys() - before.keys())]
            + [f"removed {name}" for name in sorted(before.keys() - after.keys())]
            + [f"changed {name}" for name in sorted(before.keys() & after.keys()) if before[name] != after[name]])


def _carrying(token: str) -> list[int]:
    """The pids of the processes whose environment holds ``TOKEN=token`` (what the script started)."""
    needle = f"{TOKEN}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


@contextlib.contextmanager
def _programs_started():
    """The programs this process starts inside the block (subprocess, fork, spawn, system)."""
    started: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        execute = subprocess.Popen._execute_child

        def execute_child(self, args, *rest, **keywords):
            started.append(str(args if isinstance(args, (str, bytes, os.PathLike)) else args[0]))
            return execute(self, args, *rest, **keywords)

        patch.setattr(subprocess.Popen, "_execute_child", execute_child)
        for name in ("fork", "system", "posix_spawn", "posix_spawnp"):
            original = getattr(os, name)

            def recording(*args, _original=original, _name=name, **keywords):
                started.append(f"os.{_name}{args[:1]}")
                return _original(*args, **keywords)

            patch.setattr(os, name, recording)
        yield started


@dataclass
class Witnessed:
    """One check seen from outside: its status and output, and everything it changed."""

    code: int
    out: str
    seconds: float
    changes: list[str]
    requests: list[str]
    programs: list[str]
    left: list[int]

    def side_effects(self) -> list[str]:
        own = os.path.realpath(sys.executable)
        return (self.changes + [f"HTTP request {request}" for request in self.requests]
                + [f"started {program}" for program in self.programs if os.path.realpath(program) != own]
                + [f"process {pid} left running" for pid in self.left]
                + ([f"took {self.seconds:.0f} s"] if self.seconds > BOUND_S else []))


@pytest.fixture
def witnessed(tmp_path, server, capsys, monkeypatch):
    """``witnessed(NAME, *ARGUMENTS)``: copy the hostile script NAME into a directory of witnesses
    (``@TREE@`` in it becomes that directory), check it from there, and report what happened."""
    tree = tmp_path / "tree"
    tree.mkdir()
    _witnesses(tree)
    token = uuid.uuid4().hex
    monkeypatch.chdir(tree)
    monkeypatch.setenv("HOME", str(tree / "home"))
    monkeypatch.setenv("PATH", f"{tree / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("WITNESS_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv(TOKEN, token)
    for name in ("VERL_USE_EXTERNAL_PLUGINS", "VERL_USE_EXTERNAL_MODULES"):
        monkeypatch.delenv(name, raising=False)
    left: list[int] = []

    def run(name: str, *arguments: str, place=None, text=None) -> Witnessed:
        script = tree / (place or name)
        script.parent.mkdir(parents=True, exist_ok=True)
        if text is not None:
            script.write_bytes(text)
        elif (HOSTILE / name).exists():
            script.write_text((HOSTILE / name).read_text().replace("@TREE@", str(tree)))
        _age(tree)
        before = _snapshot(tree)
        start = time.monotonic()
        with _programs_started() as programs:
            code, out = check(capsys, script.relative_to(tree) if script.exists() else place or name, *arguments)
        seconds = time.monotonic() - start
        if programs:
            time.sleep(0.2)  # what a detached process does next has happened
        left.extend(_carrying(token))
        return Witnessed(code, out, seconds, _changes(before, _snapshot(tree)), list(server.requests),
                         programs, sorted(set(left)))

    yield run
    for pid in set(left):  # processes this test's check started
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _assert_verdict(case: Case, seen: Witnessed, script: Path) -> None:
    assert seen.code in case.codes, seen.out
    for pattern in case.says:
        pattern = pattern.format(name=re.escape(script.name), line=_line(script, case.lines[0]) if case.lines else 0)
        assert re.search(pattern, seen.out), (pattern, seen.out)
    for pattern in case.never:
        assert not re.search(pattern, seen.out), (pattern, seen.out)
    if seen.code == 0:
        for pattern in case.if_ok:
            assert re.search(pattern, seen.out), (pattern, seen.out)
    elif seen.code == 2 and case.lines:
        named = "|".join(str(_line(script, text)) for text in case.lines)
        assert re.search(rf"{re.escape(script.name)}:({named})\b", seen.out), seen.out


@pytest.mark.parametrize("case", CASES, ids=[f"{c.script}{''.join('-' + a for a in c.arguments)}" for c in CASES])
def test_a_hostile_script_is_judged_and_nothing_happens(case, witnessed):
    seen = witnessed(case.script, *case.arguments)
    assert not seen.side_effects(), (seen.side_effects(), seen.out)
    _assert_verdict(case, seen, HOSTILE / case.script)


@pytest.mark.slow  # check may import the script's own plugin modules in a child process (issue 29 item 4)
def test_a_script_that_excludes_the_plugin_is_refused_naming_its_line(witnessed):
    seen = witnessed("plugins_none.sh")
    assert not seen.side_effects(), (seen.side_effects(), seen.out)
    assert seen.code == 1 and "VERL_USE_EXTERNAL_PLUGINS" in seen.out, seen.out
    line = _line(HOSTILE / "plugins_none.sh", "VERL_USE_EXTERNAL_PLUGINS")
    assert re.search(rf"plugins_none\.sh:{line}\b", seen.out), seen.out


def test_crlf_endings_are_named(witnessed):
    text = (HOSTILE / "crlf.sh").read_text().replace("\n", "\r\n").encode()
    seen = witnessed("crlf.sh", text=text)
    assert not seen.side_effects(), (seen.side_effects(), seen.out)
    assert seen.code == 2 and "CRLF" in seen.out, seen.out


ELF = b"\x7fELF\x02\x01\x01\0" + b"\0" * 56  # the start of an x86-64 executable


@pytest.mark.parametrize("name,place,text", [
    ("config.yaml", None, None), ("config.json", None, None), ("overrides.txt", None, None),
    ("missing.sh", None, None), ("tool", None, ELF), ("runs", "runs/", None),
], ids=["yaml", "json", "overrides", "missing", "binary", "directory"])
def test_only_a_script_is_a_script_one_line_exit_2(name, place, text, witnessed, tmp_path):
    if place:
        (tmp_path / "tree" / place).mkdir()
    seen = witnessed(name, place=place, text=text)
    assert not seen.side_effects(), (seen.side_effects(), seen.out)
    assert seen.code == 2 and len(seen.out.strip().splitlines()) == 1, seen.out
    assert name.rstrip("/") in seen.out, seen.out


@pytest.mark.parametrize("place", ["lr=1e-6/run.sh", "my runs/run 1.sh"], ids=["equals", "spaces"])
def test_a_script_path_with_equals_or_spaces_is_a_script(place, witnessed):
    seen = witnessed("rm_witness.sh", place=place)
    assert not seen.side_effects(), (seen.side_effects(), seen.out)
    assert seen.code == 0 and re.search(OK, seen.out), seen.out


@pytest.mark.slow  # the command in a process of its own
@pytest.mark.parametrize("name", ["trap_term.sh", "setsid_sleep.sh"])
def test_the_command_in_a_process_of_its_own_with_a_planted_log_symlink(name, tmp_path, server):
    """``python -m verl_rfpp.cli check SCRIPT`` with a symlink planted where the old check wrote
    its fixed log ($TMPDIR/verl-rfpp-check.log): the link's target, the run directory, the server
    and the process table are as before, and the command returned within the bound."""
    tree, scratch = tmp_path / "tree", tmp_path / "tmpdir"
    tree.mkdir()
    scratch.mkdir()
    _witnesses(tree)
    shutil.copy(HOSTILE / name, tree / name)
    (scratch / "verl-rfpp-check.log").symlink_to(tree / "witness.txt")
    _age(tree)
    before, token = _snapshot(tree), uuid.uuid4().hex
    env = {**os.environ, "HOME": str(tree / "home"), "TMPDIR": str(scratch), TOKEN: token,
           "PATH": f"{tree / 'bin'}:{os.environ['PATH']}",
           "WITNESS_URL": f"http://127.0.0.1:{server.server_address[1]}"}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "verl_rfpp.cli", "check", name], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - start
    time.sleep(0.2)
    left = _carrying(token)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert _changes(before, _snapshot(tree)) == [] and server.requests == [] and left == [], (
        _changes(before, _snapshot(tree)), server.requests, left, done.stdout)
    assert (scratch / "verl-rfpp-check.log").readlink() == tree / "witness.txt"
    assert seconds < BOUND_S, f"took {seconds:.0f} s"
    assert done.returncode == 0 and re.search(OK, done.stdout), done.stdout + done.stderr
