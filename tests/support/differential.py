"""bash is the judge of ``verl-rfpp check SCRIPT`` (issue 38, docs/contract.md section 6.5).

Each script of the corpus runs under real ``/bin/bash`` with ``env -i``: a fresh ``HOME`` and
working directory, ``PATH`` holding only the recording stand-ins of ``tests/support/standins.py``
(no real python is reachable). bash's outcome is the list of main_ppo argvs it started; each is
judged by check's overrides mode (``verl-rfpp check OVERRIDES``, in this process; in a child process
when the run's ``VERL_USE_EXTERNAL_*``/``PYTHONPATH`` were set, as check judges such a run). check's
outcome is ``verl-rfpp check SCRIPT ARGS`` in this process, in the same environment, directory and
``HOME`` (run before bash, so nothing bash wrote is there). They agree when check starts as many
runs, each with the same verdict (its verdict line and rule ids), and exits with the worst of their
statuses; check may instead exit 2 (it could not know). Anything else is a confident mismatch.

The corpus: ``tests/tools/differential/**/*.sh`` (a first line ``# args: WORDS`` gives the script's
arguments, split as the shell splits them) and verl's examples ``tests/tools/scripts/verl/**/*.sh``,
checked as a user switching them to our estimators checks them: with
``algorithm.adv_estimator=NAME``, our two names alternating in path order. Everything lives in one
``TemporaryDirectory`` (the scripts are copied there: nothing is written into the repository);
check's own log files go there too. Hydra's composition of a run's overrides is made once and
copied for each later run with the same overrides (it is most of the time a check takes).

Command line (the worktree's root on ``PYTHONPATH``)::

    python tests/support/differential.py [-v] [SCRIPT...]

prints one line per script (agree / exit 2 / MISMATCH, with bash's runs against check's when they
differ; a Fix: command check printed that bash, run with it, does not turn into accepted runs) and
the totals; exit 1 when anything mismatched."""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

if __package__ in (None, ""):  # run as a file: ``python tests/support/differential.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support import standins  # noqa: E402
from verl_rfpp import (
    catalog,
    validation,  # noqa: E402
)
from verl_rfpp.adapter import compose  # noqa: E402
from verl_rfpp.cli import main as cli  # noqa: E402

TESTS = Path(__file__).resolve().parent.parent
CORPUS = TESTS / "tools" / "differential"
VERL_EXAMPLES = TESTS / "tools" / "scripts" / "verl"
ESTIMATORS = catalog.ESTIMATOR_NAMES
BASH_TIMEOUT = 10.0
UNKNOWN_VALUE_ASSUMED = "it is the value of a key no rule reads"
"""check's ``assumed:`` line for an unknown value it judged (docs/contract.md section 6.5)."""
ASSUMED_SUCCESS = "() { return 0; }"
"""bash's handler of a program it cannot find: one check does not know succeeds with no output, as
check assumes where it decides what runs (an unknown command before ``&&``, under ``set -e``:
docs/contract.md section 6.5, said in an ``assumed:`` line)."""
CHECK_TIMEOUT = 300  # check bounds its own child python at 300 s; a hang is a mismatch
_HEADER = re.compile(r"^run (\d+) of (\d+) \(")
_RULE = re.compile(r"\[(\d+\.\d+(?:\.\d+)*)\]")
_WORST_LAST = (0, 1, 3, 2)  # several runs: check exits with the worst (docs/contract.md section 6.5)
_ASIDE = ("assumed:", "note:", "warning:", "(other libraries", "Fix:")


@dataclass(frozen=True)
class Script:
    """One script of the corpus: its path (under ``root``) and the arguments it is run with."""

    root: Path
    path: Path
    arguments: tuple[str, ...]

    @property
    def name(self) -> str:
        return str(self.root.name / self.path.relative_to(self.root))


@dataclass(frozen=True)
class Verdict:
    """One run's verdict as check prints it: the verdict line (notes, assumptions, warnings and the
    Fix: line aside) and the contract's rule ids it names; ``status``: its exit status when known."""

    line: str
    rules: tuple[str, ...]
    status: Optional[int] = None

    def same(self, other: Verdict) -> bool:
        return (self.line, self.rules) == (other.line, other.rules)

    def __str__(self) -> str:
        rules = f" [{' '.join(self.rules)}]" if self.rules else ""
        status = "" if self.status is None else f"exit {self.status}: "
        return f"{status}{self.line[:220]}{rules}"


@dataclass
class Outcome:
    """What happened to one script: bash's runs (argv, verdict) and check's exit status and runs."""

    script: Script
    bash_runs: list = field(default_factory=list)
    bash_status: Optional[int] = None
    bash_note: str = ""
    bash_errors: str = ""
    check_status: Optional[int] = None
    check_runs: list = field(default_factory=list)
    check_text: str = ""
    result: str = ""
    reason: str = ""
    seconds: float = 0.0
    fix: Optional[str] = None  # check's Fix: command run by bash: "ok" (every run accepted) or what it gave

    def report(self, verbose: bool = False) -> str:
        head = f"{self.result:8} {self.script.name}" + (f" ({self.seconds:.2f} s)" if verbose else "")
        if self.result == "agree" and self.fix in (None, "ok") and not verbose:
            return head
        lines = [head + (f": {self.reason}" if self.reason else "")]
        if self.fix not in (None, "ok"):
            lines.append(f"    Fix: does not fix: {self.fix[:300]}")
        if self.result == "MISMATCH" or verbose:
            lines.append(f"    bash (exit {self.bash_status}{self.bash_note}): {len(self.bash_runs)} run(s)")
            lines += [f"      {verdict}   <- {_short(argv)}" for argv, verdict in self.bash_runs]
            lines += [f"      ! {line}" for line in self.bash_errors.splitlines()[:6] if verbose]
            lines.append(f"    check (exit {self.check_status}): {len(self.check_runs)} run(s)")
            lines += [f"      {verdict}" for verdict in self.check_runs]
            if verbose or not self.check_runs:
                lines += [f"      | {line}" for line in self.check_text.splitlines()[:12]]
        return "\n".join(lines)


def corpus(include_verl: bool = True) -> list:
    """The scripts: ours (arguments from a first line ``# args: ...``) and verl's examples."""
    scripts = []
    for path in sorted(CORPUS.rglob("*.sh")):
        first = path.read_text(errors="replace").split("\n", 1)[0]
        arguments = shlex.split(first[len("# args:"):]) if first.startswith("# args:") else []
        scripts.append(Script(CORPUS, path, tuple(arguments)))
    if include_verl:
        for index, path in enumerate(sorted(VERL_EXAMPLES.rglob("*.sh"))):
            scripts.append(Script(VERL_EXAMPLES, path, (f"algorithm.adv_estimator={ESTIMATORS[index % 2]}",)))
    return scripts


class Differential:
    """The sandbox and the judge: ``with Differential() as judge: judge.run(script)``."""

    def __enter__(self) -> Differential:
        self._directory = tempfile.TemporaryDirectory(prefix="verl-rfpp-differential-")
        self.root = Path(self._directory.name)
        self.tmp = self.root / "tmp"
        self.tmp.mkdir()
        self.records = self.root / "records"
        self.bin = standins.install(self.root / "standins", self.records)
        for source in (CORPUS, VERL_EXAMPLES):
            shutil.copytree(source, self.root / "corpus" / source.name)
        self._saved_tempdir = tempfile.tempdir
        tempfile.tempdir = str(self.tmp)  # check's log files: into the sandbox, removed with it
        self._compose = compose.compose_verl_config
        compose.compose_verl_config = _memoized(self._compose)
        self._verdicts: dict = {}
        self._count = 0
        # verl imported once, unbounded in time (the bound of each check is for the reading)
        status, text = _main(["check", *validation.RECIPES[ESTIMATORS[1]]], None)
        if status != 0:
            raise RuntimeError(f"check of the recipe: exit {status}\n{text}")
        return self

    def __exit__(self, *exc) -> None:
        tempfile.tempdir = self._saved_tempdir
        compose.compose_verl_config = self._compose
        self._directory.cleanup()

    def run(self, script: Script) -> Outcome:
        """bash's runs and check's reading of one script, compared."""
        self._count += 1
        place = self.root / f"s{self._count}"
        home, work = place / "home", place / "work"
        _venv(home, self.bin)
        work.mkdir()
        path = self.root / "corpus" / script.root.name / script.path.relative_to(script.root)
        environment = {"PATH": str(self.bin), "HOME": str(home), "TMPDIR": str(self.tmp), "LANG": "C.UTF-8"}
        outcome, start = Outcome(script), time.monotonic()
        outcome.check_status, text = self._check_script(path, script.arguments, environment, work)
        outcome.check_text = text.replace(f"{self.root / 'corpus'}/", "")
        outcome.check_runs = _check_runs(outcome.check_text)
        calls, outcome.bash_status, outcome.bash_note, outcome.bash_errors = self._bash(
            path, script.arguments, environment, work)
        for call in calls:
            if call[0] == "main_ppo":
                cwd, variables, argv = call[1], call[2:5], call[5:]
                outcome.bash_runs.append((argv, self._judge(argv, cwd, variables)))
        fix = next((line[len("Fix: bash "):] for line in text.splitlines() if line.startswith("Fix: bash ")), None)
        if outcome.check_status == 1 and fix is not None:
            fixed = shlex.split(fix)[1:]
            calls, status, note, _ = self._bash(path, fixed, environment, work)
            runs = [self._judge(call[5:], call[1], call[2:5]) for call in calls if call[0] == "main_ppo"]
            outcome.fix = "ok" if runs and all(run.status == 0 for run in runs) else (
                f"bash {shlex.join(fixed)}: exit {status}{note}, "
                + (", ".join(f"run {k}: {run}" for k, run in enumerate(runs, 1)) or "no main_ppo run"))
        shutil.rmtree(place)
        outcome.seconds = time.monotonic() - start
        _compare(outcome)
        return outcome

    def _bash(self, path: Path, arguments: Sequence[str], environment: dict, work: Path) -> tuple:
        """Run the script under real bash in the sandbox: the recorded calls, bash's status, a note."""
        shutil.rmtree(self.records, ignore_errors=True)
        self.records.mkdir()
        process = subprocess.Popen(["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in environment.items()),
                                    f"BASH_FUNC_command_not_found_handle%%={ASSUMED_SUCCESS}",
                                    "/bin/bash", str(path), *arguments], cwd=work, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        note = ""
        try:
            _, errors = process.communicate(timeout=BASH_TIMEOUT)
        except subprocess.TimeoutExpired:
            note, errors = f", timed out after {BASH_TIMEOUT:g} s", b""
        deadline = time.monotonic() + (0 if note else BASH_TIMEOUT)
        while _alive(process.pid) and time.monotonic() < deadline:  # children left running in the background
            time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return standins.read_records(self.records), process.returncode, note, errors.decode(errors="replace")

    def _check_script(self, path: Path, arguments: Sequence[str], environment: dict, work: Path) -> tuple:
        """``verl-rfpp check SCRIPT ARGS`` in this process, in the sandbox's environment and directory."""
        saved, cwd = dict(os.environ), os.getcwd()
        os.environ.clear()
        os.environ.update(environment)
        os.chdir(work)
        try:
            return _main(["check", str(path), *arguments], CHECK_TIMEOUT)
        finally:
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(saved)

    def _judge(self, argv: Sequence[str], cwd: str, variables: Sequence[str]) -> Verdict:
        """``verl-rfpp check OVERRIDES`` on one run bash started, in the environment it got."""
        overrides = _overrides(argv, cwd)
        changed = {key: value[1:] if value[:1] == "1" else None
                   for key, value in zip(standins.ENVIRONMENT_KEYS, variables, strict=True) if value != "0"}
        key = (tuple(overrides), tuple(sorted(changed.items())), cwd if changed else "")
        if key not in self._verdicts:
            if changed:
                status, text = _child_check(overrides, changed, cwd, self.tmp)
            else:
                status, text = _main(["check", *overrides], CHECK_TIMEOUT)
            verdict = _verdict(text.splitlines())
            self._verdicts[key] = Verdict(verdict.line, verdict.rules, status)
        return self._verdicts[key]


def _memoized(compose_verl_config):
    """Hydra's composition, once per (overrides, config path, config name): a copy of the config
    it gave, or the error it raised (half a second of CPU a composition; most runs repeat)."""
    cache: dict = {}

    def composing(overrides, config_path=None, config_name=None):
        key = (tuple(overrides), config_path, config_name)
        if key not in cache:
            try:
                cache[key] = (True, compose_verl_config(overrides, config_path, config_name))
            except Exception as error:  # noqa: BLE001 (what check makes of it is check's business)
                cache[key] = (False, error)
        ok, value = cache[key]
        if not ok:
            raise value
        return copy.deepcopy(value)

    return composing


def _venv(home: Path, bin_: Path) -> None:
    """``$HOME/venv``: a virtual environment whose interpreters are the stand-ins."""
    venv = home / "venv" / "bin"
    venv.mkdir(parents=True)
    for name in ("python", "python3"):
        (venv / name).symlink_to(bin_ / name)
    (venv / "activate").write_text('VIRTUAL_ENV="$HOME/venv"\nexport VIRTUAL_ENV\nPATH="$VIRTUAL_ENV/bin:$PATH"\n'
                                   "export PATH\n")


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _overrides(argv: Sequence[str], cwd: str) -> list:
    """main_ppo's argv as check's overrides mode takes it: Hydra's ``--config-dir DIR`` (relative to
    the run's directory) read as Hydra reads it, the primary config taken from DIR when it is there."""
    words, out, config_dir, name = list(argv), [], None, "ppo_trainer"
    while words:
        word = words.pop(0)
        flag, equals, value = word.partition("=")
        if flag in ("-cd", "--config-dir", "-cn", "--config-name", "-cp", "--config-path"):
            value = value if equals else (words.pop(0) if words else "")
            if flag in ("-cd", "--config-dir"):
                config_dir = os.path.join(cwd, value)
                continue
            if flag in ("-cn", "--config-name"):
                name = value
            out += [flag, value]
        else:
            out.append(word)
    primary = name if name.endswith(".yaml") else f"{name}.yaml"
    if config_dir and "-cp" not in out and "--config-path" not in out and Path(config_dir, primary).is_file():
        out = ["-cp", config_dir, "hydra.searchpath=[pkg://verl.trainer.config]", *out]
    return out


def _main(arguments: Sequence[str], timeout: Optional[int]) -> tuple:
    """``cli.main(arguments)`` in this process: its exit status and what it printed (bounded in time)."""
    out = io.StringIO()

    def expired(*_):
        raise TimeoutError(f"check took more than {timeout} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(timeout or 0)
    try:
        with contextlib.redirect_stdout(out):
            status = cli.main(list(arguments))
    except TimeoutError as error:
        status = None
        out.write(f"{error}\n")
    except BaseException as error:  # noqa: BLE001 (a traceback is check's outcome too)
        if isinstance(error, KeyboardInterrupt):
            raise
        status = None
        out.write(f"raised {type(error).__name__}: {error}\n")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return status, out.getvalue()


def _child_check(overrides: Sequence[str], changed: dict, cwd: str, tmp: Path) -> tuple:
    """check's overrides mode in a child process with the run's ``VERL_USE_EXTERNAL_*``/``PYTHONPATH``
    (verl reads them when it is imported; this process has imported it already)."""
    environment = dict(os.environ)
    ours = os.environ.get("PYTHONPATH", "")
    for key, value in changed.items():
        if value is None:
            environment.pop(key, None)
        else:
            environment[key] = value
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (changed.get("PYTHONPATH"), ours) if p)
    environment["TMPDIR"] = str(tmp)  # its log file: in the sandbox
    result = subprocess.run([sys.executable, "-m", "verl_rfpp.cli", "check", *overrides], cwd=cwd,
                            env=environment, capture_output=True, text=True, timeout=300)
    return result.returncode, result.stdout


def _verdict(lines: Sequence[str]) -> Verdict:
    kept = [line for line in lines if line.strip() and not line.startswith(_ASIDE)]
    return Verdict(kept[0] if kept else "", tuple(sorted(set(_RULE.findall("\n".join(kept))))))


def _check_runs(text: str) -> list:
    """The verdict of each run check's output names (one block, or ``run K of N`` blocks)."""
    blocks, current = [], []
    for line in text.splitlines():
        if _HEADER.match(line):
            current = []
            blocks.append(current)
        elif blocks:
            current.append(line)
    if not blocks:
        blocks = [text.splitlines()]
    return [_verdict(block) for block in blocks]


def _compare(outcome: Outcome) -> None:
    if outcome.check_status == 2:
        outcome.result = "exit 2"
        outcome.reason = next((line for line in outcome.check_text.splitlines()
                               if line.startswith("verl-rfpp check:")), "")[:160]
        return
    outcome.result = "MISMATCH"
    bash, check = [verdict for _, verdict in outcome.bash_runs], outcome.check_runs
    if outcome.check_status is None:
        outcome.reason = "check did not exit: " + outcome.check_text.strip().splitlines()[-1][:160]
    elif outcome.bash_note:
        outcome.reason = "bash did not finish, check is confident"
    elif not bash:
        outcome.reason = f"bash started no main_ppo run, check exits {outcome.check_status}"
    elif len(bash) != len(check):
        outcome.reason = f"bash started {len(bash)} run(s), check reads {len(check)}"
    elif not all(b.same(c) for b, c in zip(bash, check, strict=True)) and not _same_in_another_order(bash, check):
        which = [k for k, (b, c) in enumerate(zip(bash, check, strict=True), 1) if not b.same(c)]
        outcome.reason = f"another verdict for run(s) {', '.join(map(str, which))}"
        if UNKNOWN_VALUE_ASSUMED in outcome.check_text and all(bash[k - 1].status == 3 for k in which):
            outcome.result = "assumed"
            outcome.reason += (": check assumed an unknown value Hydra reads (said in an assumed: line); bash's "
                               "value here is one Hydra's grammar refuses")
    elif outcome.check_status != max((b.status for b in bash), key=_WORST_LAST.index):
        outcome.reason = f"the same verdicts, but check exits {outcome.check_status}"
    else:
        outcome.result, outcome.reason = "agree", ""


def _same_in_another_order(bash: list, check: list) -> bool:
    """The same verdicts in another order: runs started with ``&`` record in the order they start,
    which bash does not fix."""
    return sorted((v.line, v.rules) for v in bash) == sorted((v.line, v.rules) for v in check)


def _short(argv: Sequence[str]) -> str:
    """A run's words less those of our recipes, shortened for a report line."""
    recipes = {word for name in ESTIMATORS for word in validation.RECIPES[name]}
    text = " ".join(shlex.quote(word) for word in argv if word not in recipes) or "(the recipe)"
    return text if len(text) <= 160 else text[:157] + "..."


def run_all(scripts: Sequence[Script], progress=None) -> list:
    """Every script's outcome, in one sandbox."""
    outcomes = []
    with Differential() as judge:
        for script in scripts:
            outcomes.append(judge.run(script))
            if progress is not None:
                progress(outcomes[-1])
    return outcomes


def totals(outcomes: Sequence[Outcome]) -> str:
    counts = {result: sum(o.result == result for o in outcomes) for result in ("agree", "exit 2", "assumed",
                                                                                "MISMATCH")}
    fixes = [o.fix for o in outcomes if o.fix is not None]
    return (f"{len(outcomes)} scripts: {counts['agree']} agree, {counts['exit 2']} exit 2, {counts['assumed']} "
            f"differ only where check's assumed: line says so, {counts['MISMATCH']} mismatch; "
            f"Fix: bash commands: {len(fixes)}, {fixes.count('ok')} give only accepted runs under bash")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="print every script's runs and check's output")
    parser.add_argument("--ours", action="store_true", help="only tests/tools/differential, not verl's examples")
    parser.add_argument("scripts", nargs="*", help="paths of corpus scripts (default: the whole corpus)")
    args = parser.parse_args(argv)
    scripts = corpus(include_verl=not args.ours)
    if args.scripts:
        wanted = {Path(p).resolve() for p in args.scripts}
        scripts = [s for s in scripts if s.path.resolve() in wanted]
    start, cpu, children = time.monotonic(), time.process_time(), _children_cpu()
    outcomes = run_all(scripts, progress=lambda outcome: print(outcome.report(args.verbose), flush=True))
    print(f"{totals(outcomes)} ({time.monotonic() - start:.0f} s; CPU: {time.process_time() - cpu:.0f} s in this "
          f"process, {_children_cpu() - children:.0f} s in its children: bash, the stand-ins, child pythons)")
    return 1 if any(o.result == "MISMATCH" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
