"""oils' spec tests as an outside judge of check's bash reader (issue 49, item 4).

The cases of oils' ``spec/*.test.sh`` (https://github.com/oils-for-unix/oils) were written by people
who never saw this reader; each is run under real ``/bin/bash`` and read by
``verl_rfpp.bash_reader.shell.Shell`` in this process, and the two are compared word for word. oils
is another project's code: it is not committed here, this script reads it from an oils checkout or
bare git directory given on the command line, and writes each case only into a temporary directory
it removes. It starts processes and needs oils, so no test runs it; it is a tool for a person.

A case is the code under a ``#### name`` header up to its first ``## `` annotation, or its ``## code:``
line (oils' expected
output is not used: bash is the judge). Both sides see the same text and record the argv of every
command that prints or runs: ``echo`` and ``printf`` (bash: functions, loaded by ``BASH_ENV`` so that
line numbers do not move, that record and call the builtin; the reader: its builtins wrapped the
same way) and every program (``argv.py`` and the rest; none is on bash's ``PATH``, its
``command_not_found_handle`` records the argv and succeeds with no output, and the reader's
``on_command`` answers the same: a neutral machine). bash's own builtins that the reader hands to
``on_command`` (``type``, ``kill``, ...) are not recorded on either side and are unknown to the
reader. Each side runs from a fresh empty directory with ``env -i`` and ``PATH``, ``HOME``, ``TMP``,
``LANG``; the reader reads first. bash has only its builtins (and ``env``, ``basename``, ``dirname``,
which the reader models): what a case writes by redirection lands in the sandbox (oils' cases write
under ``$TMP`` or relative paths), removed at the end.

Outcome of a case:

- ``exact``: the same argvs, in order (in any order where pipeline parts or ``&`` bodies record), and
  the same exit status where the reader knows it;
- ``refused``: the reader raised ``ReadError`` (check's exit 2);
- ``unknown``: they differ, and the reading held an unknown value (a marker: it said it cannot know);
- ``assumed``: they differ where the reader printed an assumption (check's ``assumed:`` line);
- ``outside``: outside the modeled subset: tree-sitter-bash cannot parse it, it starts another shell
  (``$SH``, ``sh -c``), runs a program by path or sets ``PATH``, or the reader refused a construct docs/contract.md
  section 6.5 lists as refused (``eval``, ``read``, brace expansion, ``${!V}``, ...);
- ``WRONG``: different argvs or status, read confidently; ``CRASH``: another exception.

"tried" counts the cases inside the modeled subset (all but ``outside``).

Command line (the worktree's root on ``PYTHONPATH``)::

    python benchmarks/oils_spec.py OILS [--files arith,word-split] [-v]

``OILS``: an oils checkout or a bare git directory (``git show HEAD:spec/...``). Prints the counts per
file and every wrong case (its code, bash's argvs and status, the reader's); ``-v`` every case.
Exit 1 when any case is confidently wrong (or crashed)."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
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

FILES = ("arith", "var-op-bash", "var-op-len", "var-op-patsub", "var-op-slice", "var-op-strip", "var-op-test",
         "word-split", "quote", "dbracket", "case_", "assign", "func-parsing", "errexit")
"""issue 49's list (``func``: oils' file is ``func-parsing``)."""
BASH = "/bin/bash"
BASH_TIMEOUT = 5.0
READ_TIMEOUT = 20
_ANNOTATION = re.compile(r"^##( |$)")

# Cases outside the modeled subset whatever the reader does: they start another shell or a real program.
_ELSEWHERE = re.compile(r"\$\{?SH\b|\b(?:sh|bash|dash|zsh|mksh)\s+-c\b|(?:^|[\s;|&(])/(?:usr/)?s?bin/|\bPATH=")
# Pipeline parts and ``&`` bodies run at once: bash does not fix the order in which they record.
_CONCURRENT = re.compile(r"(?<![|])\|(?![|])|(?<![&>])&(?![&>])")
# Constructs docs/contract.md section 6.5 lists as refused: a refusal of a case holding one is "outside".
_LISTED_REFUSED = [re.compile(pattern, re.M) for pattern in (
    r"\beval\b", r"\bread\b", r"\bmapfile\b", r"\breadarray\b", r"\bgetopts\b", r"\blet\b", r"\balias\b",
    r"\bpushd\b", r"\bpopd\b", r"\bcommand\s+\w", r"\bbuiltin\b", r"\b(?:declare|typeset|local)\s+-\w*[iAnluc]",
    r"\{[^{}\s]*,[^{}\s]*\}", r"\{-?\w+\.\.-?\w+(?:\.\.-?\d+)?\}", r"\$\{!", r"@[QEPAaKkUuL]\}",
    r"\(\(.*(?:\+\+|--)", r"\bfor\s*\(\(", r"\bselect\b", r"\bcoproc\b", r"[<>]\(",
    r"[@+!*?]\([^)]*\)", r"\bshopt\s+-s\s+(?!extglob)", r"\btrap\b", r"^\s*[A-Za-z_]\w*\[[^]]*\]\+?=",
    r"\$'[^']*\\[uUc]", r"\[\[.*\s[<>]\s", r"\b0b[01]", r"\bset\s+-o\s+(?!(?:errexit|nounset|pipefail|xtrace|"
    r"noglob|verbose|noexec)\b)\w", r"\bshopt\s+-s\s+extglob", r"&\s*$", r"\bIFS=")]


@dataclass(frozen=True)
class Case:
    """One case of a spec file: its file, header, the line of its header and its code."""

    file: str
    name: str
    line: int
    code: str


def split_cases(text: str, file: str = "") -> list:
    """The cases of a spec file: the lines after each ``#### name`` up to its first ``## `` annotation
    (a multi-line ``## STDOUT:`` ... ``## END`` block holds no code), or the text of its ``## code:``
    line (oils' way to write code a spec file could not hold: an unterminated quote)."""
    cases, header, code, in_code = [], None, [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("#### "):
            if header is not None:
                cases.append(Case(file, header[0], header[1], "\n".join(code).strip("\n") + "\n"))
            header, code, in_code = (line[5:].strip(), number), [], True
        elif header is not None and line.startswith("## code: "):
            code, in_code = [line[len("## code: "):]], False  # a case written on its annotation line
        elif header is not None and in_code:
            if _ANNOTATION.match(line):
                in_code = False
            else:
                code.append(line)
    if header is not None:
        cases.append(Case(file, header[0], header[1], "\n".join(code).strip("\n") + "\n"))
    return cases


def spec_text(oils: Path, name: str) -> str:
    """``spec/NAME.test.sh`` of an oils checkout, or of a bare git directory's HEAD."""
    path = oils / "spec" / f"{name}.test.sh"
    if path.is_file():
        return path.read_text(errors="surrogateescape")
    return subprocess.run(["git", "-C", str(oils), "show", f"HEAD:spec/{name}.test.sh"], check=True,
                          capture_output=True).stdout.decode(errors="surrogateescape")


@dataclass
class Outcome:
    case: Case
    result: str = ""
    reason: str = ""
    bash_records: list = field(default_factory=list)
    bash_status: Optional[int] = None
    reader_records: list = field(default_factory=list)
    reader_status: Optional[int] = None
    assumptions: tuple = ()
    unknown_values: tuple = ()

    def report(self, verbose: bool) -> str:
        head = f"{self.result:8} {self.case.file}:{self.case.line} {self.case.name}"
        if self.reason:
            head += f": {self.reason[:200]}"
        if self.result not in ("WRONG", "CRASH") and not verbose:
            return head
        lines = [head]
        lines += [f"    | {line}" for line in self.case.code.rstrip("\n").splitlines()]
        lines.append(f"    bash (exit {self.bash_status}):")
        lines += [f"      {shlex.join(record)!r}" for record in self.bash_records]
        lines.append(f"    reader (exit {self.reader_status}):")
        lines += [f"      {shlex.join(record)!r}" for record in self.reader_records]
        return "\n".join(lines)


def _bash_builtins() -> frozenset:
    result = subprocess.run([BASH, "-c", "compgen -b"], capture_output=True, text=True, check=True)
    return frozenset(result.stdout.split())


_PRELUDE = """unset BASH_ENV
__rec() {{ builtin printf '%s\\0' "$#" "$@" >> {records}; }}
echo() {{ __rec echo "$@"; builtin echo "$@"; }}
printf() {{ __rec printf "$@"; builtin printf "$@"; }}
command_not_found_handle() {{ __rec "$@"; [[ -p /dev/stdin ]] && while IFS= read -r -d '' _; do :; done; return 0; }}
"""


_ENV = """#!{bash}
# env as the reader models it: -i, -u NAME, NAME=VALUE, then a program: a stand-in here or recorded
# (by the prelude's command_not_found_handle, in a bash that has only it); with no program, the real env.
args=("$@"); i=0
while (( i < ${{#args[@]}} )); do
  case ${{args[i]}} in -i|-u|-[iu]*|*=*) [[ ${{args[i]}} == -u ]] && i=$((i + 1)); i=$((i + 1)) ;; *) break ;; esac
done
(( i == ${{#args[@]}} )) && exec {env} "$@"
exec {env} "${{args[@]:0:i}}" {bash} -c 'source {prelude}; unset -f echo printf; "$@"' env "${{args[@]:i}}"
"""


class Judge:
    """The sandbox: ``with Judge() as judge: judge.run(case)``."""

    def __enter__(self) -> Judge:
        from verl_rfpp.bash_reader import builtins, parse, shell  # the worktree's reader (PYTHONPATH)

        self._modules = builtins, parse, shell
        self._directory = tempfile.TemporaryDirectory(prefix="verl-rfpp-oils-")
        self.root = Path(self._directory.name)
        self.bin = self.root / "bin"  # bash's PATH: empty, every program is not found
        self.bin.mkdir()
        self.records = self.root / "records"
        self.prelude = self.root / "prelude.sh"
        self.prelude.write_text(_PRELUDE.format(records=shlex.quote(str(self.records))))
        for name in ("basename", "dirname"):  # programs the reader models: the real ones, not recorded
            (self.bin / name).symlink_to(shutil.which(name))
        (self.bin / "env").write_text(_ENV.format(bash=BASH, env=shutil.which("env"), prelude=self.prelude))
        (self.bin / "env").chmod(0o755)
        self.bash_builtins = _bash_builtins()
        self._count = 0
        return self

    def __exit__(self, *exc) -> None:
        self._directory.cleanup()

    def run(self, case: Case) -> Outcome:
        self._count += 1
        place = self.root / f"c{self._count}"
        home, work = place / "home", place / "work"
        home.mkdir(parents=True)
        work.mkdir()
        script = place / "case.sh"
        script.write_text(case.code, errors="surrogateescape")
        environment = {"PATH": str(self.bin), "HOME": str(home), "TMP": str(work), "LANG": "C.UTF-8"}
        outcome = Outcome(case)
        self._read(outcome, script, environment, work)
        outcome.bash_records, outcome.bash_status = self._bash(script, environment, work)
        _compare(outcome)
        shutil.rmtree(place, ignore_errors=True)
        return outcome

    def _read(self, outcome: Outcome, script: Path, environment: dict, work: Path) -> None:
        builtins, parse, shell = self._modules
        records, by_path = outcome.reader_records, []
        try:
            parse.parse_script(script.read_bytes(), str(script))
        except parse.ReadError as error:
            outcome.result, outcome.reason = "outside", f"parse: {error}"
            return

        def answer(reader, command):
            if not reader.is_unknown(command.words[0]) and command.words[0] in self.bash_builtins:
                return shell.Answer(None, None)  # a builtin bash runs itself, which the reader does not model
            if "/" in command.words[0]:
                by_path.append(command.words[0])  # bash runs it (or fails), no handler: outside
            records.append(tuple(command.words))
            return shell.Answer(0, "")

        def recording(original):
            def record(reader, fields, node):
                records.append(tuple(fields))
                return original(reader, fields, node)
            return record

        saved = {name: builtins.BUILTINS[name] for name in ("echo", "printf")}
        cwd = os.getcwd()

        def expired(*_):
            raise TimeoutError(f"the reading took over {READ_TIMEOUT} s")

        previous = signal.signal(signal.SIGALRM, expired)
        signal.alarm(READ_TIMEOUT)
        try:
            for name, original in saved.items():
                builtins.BUILTINS[name] = recording(original)
            os.chdir(work)
            reader = shell.Shell(script, [], environment, answer, cwd=str(work), invoked_as=str(script))
            outcome.reader_status = reader.read()
            outcome.assumptions = tuple(reader.assumptions)
            outcome.unknown_values = tuple(reader.unknowns.values())
        except (parse.ReadError, RecursionError) as error:
            outcome.result, outcome.reason = "refused", str(error) or type(error).__name__
        except Exception as error:  # noqa: BLE001 (a traceback is an outcome: check would crash)
            outcome.result, outcome.reason = "CRASH", f"{type(error).__name__}: {error}"
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
            os.chdir(cwd)
            builtins.BUILTINS.update(saved)
        if outcome.result == "" and by_path:
            outcome.result, outcome.reason = "outside", f"runs a program by path: {reader.shown(by_path[0])[:60]}"
        if outcome.result == "":
            unknown = bool(reader.unknowns)
            outcome.reader_records[:] = [tuple(reader.shown(word) if reader.is_unknown(word) else word
                                               for word in record) for record in records]
            outcome.reason = "unknown" if unknown else ""

    def _bash(self, script: Path, environment: dict, work: Path) -> tuple:
        self.records.unlink(missing_ok=True)
        process = subprocess.Popen(["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in environment.items()),
                                    f"BASH_ENV={self.prelude}", BASH, str(script)], cwd=work,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        try:
            process.wait(timeout=BASH_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass
        status = process.wait() if process.returncode is None else process.returncode
        deadline = time.monotonic() + BASH_TIMEOUT
        while _alive(process.pid) and time.monotonic() < deadline:  # its children left running in the background
            time.sleep(0.005)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        status = process.wait()
        data = self.records.read_bytes() if self.records.exists() else b""
        return _records(data), status


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _records(data: bytes) -> list:
    """``__rec``'s file: for each call, its argument count and arguments, NUL-terminated."""
    parts, found = data.split(b"\0")[:-1], []
    index = 0
    while index < len(parts):
        count = int(parts[index])
        found.append(tuple(p.decode(errors="surrogateescape") for p in parts[index + 1:index + 1 + count]))
        index += 1 + count
    return found


def _compare(outcome: Outcome) -> None:
    code = outcome.case.code
    if outcome.result != "":
        if outcome.result == "refused" and any(p.search(code) for p in _LISTED_REFUSED):
            outcome.result = "outside"
        return
    if _ELSEWHERE.search(code):
        outcome.result, outcome.reason = "outside", "starts another shell or a program by path"
        return
    unknown = outcome.reason.startswith("unknown")
    same = outcome.bash_records == outcome.reader_records or (
        _CONCURRENT.search(code) is not None and sorted(outcome.bash_records) == sorted(outcome.reader_records))
    status = outcome.reader_status is None or outcome.reader_status == outcome.bash_status
    if same and status:
        outcome.result, outcome.reason = "exact", ""
    elif unknown:
        outcome.result = "unknown"
        held = ", ".join(f"line {where}: {what}" for where, what in outcome.unknown_values)
        outcome.reason = f"they differ; the reading held unknown values ({held[:160]})"
    else:
        outcome.result = "assumed" if outcome.assumptions else "WRONG"
        outcome.reason = "other argvs" if not same else f"exit {outcome.reader_status}, bash's {outcome.bash_status}"
        if outcome.assumptions:
            outcome.reason += f" where the reader said: {'; '.join(outcome.assumptions)}"


RESULTS = ("exact", "refused", "unknown", "assumed", "outside", "WRONG", "CRASH")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("oils", type=Path, help="an oils checkout or bare git directory")
    parser.add_argument("--files", default=",".join(FILES), help="spec files, comma-separated (default: %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case")
    args = parser.parse_args(argv)
    start = time.monotonic()
    counts: dict = {}
    wrong = 0
    with Judge() as judge:
        for name in args.files.split(","):
            row = counts.setdefault(name, dict.fromkeys(RESULTS, 0))
            for case in split_cases(spec_text(args.oils, name), name):
                outcome = judge.run(case)
                row[outcome.result] += 1
                wrong += outcome.result in ("WRONG", "CRASH")
                if args.verbose or outcome.result in ("WRONG", "CRASH"):
                    print(outcome.report(args.verbose), flush=True)
    total = dict.fromkeys(RESULTS, 0)
    for row in counts.values():
        for result in RESULTS:
            total[result] += row[result]
    width = max(len(name) for name in (*counts, "total")) + 2
    columns = ("outside", "exact", "refused", "unknown", "assumed", "WRONG", "CRASH")
    print(f"\n{'file':{width}} {'cases':>6} {'outside':>8} {'tried':>6} " + " ".join(f"{r:>8}" for r in columns[1:]))
    for name, row in [*counts.items(), ("total", total)]:
        cases = sum(row.values())
        print(f"{name:{width}} {cases:6} {row['outside']:8} {cases - row['outside']:6} "
              + " ".join(f"{row[r]:8}" for r in columns[1:]))
    print(f"({time.monotonic() - start:.0f} s)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
