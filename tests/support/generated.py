"""Generated scripts judged by real bash, word for word (issue 49; docs/contract.md section 6.5).

A Hypothesis strategy composes small bash scripts from the grammar of the constructs the reader
models (assignments, every parameter-expansion operator over values with slashes, blanks, tabs,
newlines, glob characters, empties and unset names; quoting and word splitting with several IFS;
patterns, ``[[ ]]``, ``test``, ``case``; ``if``, ``for``, arrays, functions, ``echo``/``printf``
in ``$( )``). Each ends by calling the recording command ``rec`` (a stand-in that records its argv
and prints nothing) or ``python3 -m verl.trainer.main_ppo`` with the words under test.

Each script runs under real ``/bin/bash`` (``env -i``; ``PATH`` holds only the recording stand-ins
of ``tests/support/standins.py`` and ``rec``), many scripts in one driver bash process (the records
of each script are told apart by the time it started). The same script is read in this process by
check's reader (``verl_rfpp.bash_reader.shell.Shell``) whose ``on_command`` records each command's
words and answers ``rec`` and main_ppo as the stand-ins do (status 0, no output). bash's calls
(``rec``'s argv, main_ppo's argv, any other stand-in's) must equal the reader's, in order, word for
word; or the reader refuses (``ReadError``: check's exit 2) or leaves a word unknown. Anything else
is a confident mismatch, reported as a minimal script (statements and words removed while the
mismatch stays).

Command line (the worktree's root on ``PYTHONPATH``)::

    python tests/support/generated.py [--long SECONDS] [--seed N] [--batch N] [FILE...]

hunts for SECONDS (default 60), printing every mismatch as a minimal script and the totals;
with FILEs judges those scripts (a first line ``# args: WORDS`` gives the arguments). Exit 1
when anything mismatched.

One file of over 600 lines on purpose: the grammar, the bash driver, the reader's side and the
shrinker are one oracle run as one script (the command line above), and each part is read against
the others."""

from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, Sequence

if __package__ in (None, ""):  # run as a file: ``python tests/support/generated.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from support import standins  # noqa: E402
from verl_rfpp.bash_reader import parse, shell, words  # noqa: E402
from verl_rfpp.cli import scripts as launch_grammar  # noqa: E402

MAIN_PPO = "python3 -m verl.trainer.main_ppo"
BATCH = 50  # scripts per bash driver process
BATCH_TIMEOUT = 120.0  # seconds one driver may take (the generated scripts end: loops are over known words)
GENERATED = Path(__file__).resolve().parent.parent / "tools" / "generated"

_REC = """#!/bin/bash
printf '%s\\0' rec "$@" > {records}/"${{EPOCHREALTIME/./}}.$$.$RANDOM"
"""


# --- scripts ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Script:
    """A generated script: statements, each a tuple of words joined by a blank (a compound one is a
    single word), the arguments it is run with and what comes before its first line (a BOM)."""

    statements: tuple[tuple[str, ...], ...]
    arguments: tuple[str, ...] = ()
    prefix: str = ""

    @property
    def text(self) -> str:
        return self.prefix + "".join(" ".join(statement) + "\n" for statement in self.statements)

    def shown(self) -> str:
        """The script as a file of the regression corpus (tests/tools/generated/)."""
        return f"# args: {shlex.join(self.arguments)}\n" * bool(self.arguments) + self.text

    @classmethod
    def from_file(cls, path: Path) -> Script:
        data = path.read_bytes().decode("utf-8", "surrogateescape")
        prefix = "\ufeff" if data.startswith("\ufeff") else ""
        data = data[len(prefix):]
        arguments: tuple = ()
        if data.startswith("# args:"):
            first, _, data = data.partition("\n")
            arguments = tuple(shlex.split(first[len("# args:"):]))
        return cls(((data.removesuffix("\n"),),), arguments, prefix)


@dataclass
class Outcome:
    """bash's calls and the reader's for one script: ``result`` is ``agree``, ``refused`` (the
    reader's ReadError, with ``reason``), ``unknown`` (a word the reader leaves unknown) or
    ``MISMATCH``."""

    script: Script
    bash: list = field(default_factory=list)
    bash_status: Optional[int] = None
    reader: list = field(default_factory=list)
    result: str = ""
    reason: str = ""

    def report(self, errors: str = "") -> str:
        lines = [f"{self.result}: {self.reason}", "--- script" + (f" (args: {shlex.join(self.script.arguments)})"
                                                                   if self.script.arguments else ""),
                 self.script.text.rstrip("\n"), f"--- bash (exit {self.bash_status})"]
        lines += [f"  {_shown_call(call)}" for call in self.bash]
        lines += ["--- reader"] + [f"  {_shown_call(call)}" for call in self.reader]
        if errors.strip():
            lines += ["--- bash's stderr", errors.rstrip()]
        return "\n".join(lines)


def _shown_call(call: tuple) -> str:
    return " ".join(repr(word) for word in call)


# --- the judge -------------------------------------------------------------------------------------

class Judge:
    """A sandbox (stand-ins, home, an empty working directory) in one temporary directory; judges
    scripts in batches, one bash driver process a batch."""

    def __enter__(self) -> Judge:
        self._directory = tempfile.TemporaryDirectory(prefix="verl-rfpp-generated-")
        root = Path(self._directory.name)
        self.records = root / "records"
        self.bin = standins.install(root / "sandbox", self.records)
        (self.bin / "rec").write_text(_REC.format(records=shlex.quote(str(self.records))))
        (self.bin / "rec").chmod(0o755)
        self.home, self.work, self.scripts = root / "home", root / "work", root / "scripts"
        for folder in (self.home, self.work, self.scripts):
            folder.mkdir()
        self.environment = {"PATH": str(self.bin), "HOME": str(self.home), "LANG": "C.UTF-8"}
        self._count = 0
        return self

    def __exit__(self, *exc) -> None:
        self._directory.cleanup()

    def judge(self, batch: Sequence[Script]) -> list:
        """Each script run by bash and read by the reader, compared."""
        paths = []
        for script in batch:
            self._count += 1
            path = self.scripts / f"s{self._count}.sh"
            path.write_bytes(script.text.encode("utf-8", "surrogateescape"))
            paths.append(path)
        calls, statuses = self._bash(paths, [script.arguments for script in batch])
        outcomes = []
        for script, path, found, status in zip(batch, paths, calls, statuses, strict=True):
            outcome = Outcome(script, found, status)
            self._read(outcome, path)
            outcomes.append(outcome)
            path.unlink()
        return outcomes

    def errors(self, script: Script) -> str:
        """bash's stderr for one script (for a report)."""
        path = self.scripts / "errors.sh"
        path.write_bytes(script.text.encode("utf-8", "surrogateescape"))
        result = subprocess.run(["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in self.environment.items()),
                                 "/bin/bash", str(path), *script.arguments], cwd=self.work, stdin=subprocess.DEVNULL,
                                capture_output=True, timeout=BATCH_TIMEOUT)
        path.unlink()
        for record in self.records.iterdir():
            record.unlink()
        return result.stderr.decode(errors="replace")

    def _bash(self, paths: Sequence[Path], arguments: Sequence[Sequence[str]]) -> tuple:
        """Run every script under bash, one after another in one driver: (calls, status) each."""
        environment = " ".join(shlex.quote(f"{k}={v}") for k, v in self.environment.items())
        lines = []
        for index, (path, words_) in enumerate(zip(paths, arguments, strict=True)):
            lines.append(f'printf "T{index} %s\\n" "${{EPOCHREALTIME/./}}"\n'
                         f"/usr/bin/env -i {environment} /bin/bash {shlex.quote(str(path))} {shlex.join(words_)} "
                         f"</dev/null >/dev/null 2>&1\nprintf 'S{index} %s\\n' $?\n")
        lines.append(f'printf "T{len(paths)} %s\\n" "${{EPOCHREALTIME/./}}"\n')
        driver = self.scripts / "driver.sh"
        driver.write_text("".join(lines))
        result = subprocess.run(["/bin/bash", str(driver)], cwd=self.work, env=self.environment,
                                stdin=subprocess.DEVNULL, capture_output=True, timeout=BATCH_TIMEOUT)
        driver.unlink()
        starts, statuses = [], [None] * len(paths)
        for line in result.stdout.decode().splitlines():
            kind, index, value = line[0], int(line[1:].split()[0]), line.split()[1]
            if kind == "T":
                starts.append((int(value), index))
            else:
                statuses[index] = int(value)
        calls: list = [[] for _ in paths]
        for record in sorted(self.records.iterdir()):
            when = int(record.name.split(".")[0])
            index = max((i for start, i in starts if start <= when), default=None)
            fields = record.read_bytes().decode("utf-8", "surrogateescape").split("\0")[:-1]
            record.unlink()
            if index is None or index >= len(paths):
                raise RuntimeError(f"a record outside every script's time: {fields}")
            if fields[0] == "python":
                continue  # the interpreter's own record; main_ppo's follows it
            if fields[0] == "main_ppo":
                fields = ["main_ppo", *fields[5:]]  # less the cwd and the three judged variables
            calls[index].append(tuple(fields))
        return calls, statuses

    def _read(self, outcome: Outcome, path: Path) -> None:
        found: list = []

        def on_command(reader: shell.Shell, command: shell.Command) -> shell.Answer:
            words_ = command.words
            launch = launch_grammar.main_ppo_arguments(words_)
            if words_[0] == "rec":
                found.append(("rec", *words_[1:]))
            elif launch is not None:
                found.append(("main_ppo", *words_[launch[0]:]))
            else:
                found.append((os.path.basename(words_[0]), *words_[1:]))
                return shell.Answer(None, None)
            return shell.Answer(0, "")

        try:
            reader = shell.Shell(path, list(outcome.script.arguments), dict(self.environment), on_command,
                                 cwd=str(self.work), invoked_as=str(path))
            reader.read()
        except parse.ReadError as error:
            outcome.reader, outcome.result, outcome.reason = found, "refused", f"line {error.line}: {error.why}"
            return
        except words.Unsupported as error:
            outcome.reader, outcome.result, outcome.reason = found, "refused", str(error)
            return
        except RecursionError:
            outcome.reader, outcome.result, outcome.reason = found, "refused", "nests too deeply"
            return
        except Exception as error:  # noqa: BLE001 (a traceback is a mismatch: check must exit 2 or be right)
            outcome.reader, outcome.result = found, "MISMATCH"
            outcome.reason = f"the reader raised {type(error).__name__}: {error}"
            return
        outcome.reader = found
        if any(reader.is_unknown(word) for call in found for word in call):
            outcome.result, outcome.reason = "unknown", "a word the reader does not know"
        elif outcome.reader == outcome.bash:
            outcome.result = "agree"
        else:
            outcome.result = "MISMATCH"
            outcome.reason = _difference(outcome.bash, outcome.reader)

    def minimize(self, script: Script) -> Script:
        """A smaller script that still mismatches: statements, words and arguments removed, one at
        a time, while the mismatch stays (``script`` itself when it no longer mismatches alone)."""
        def mismatches(candidate: Script) -> bool:
            return self.judge([candidate])[0].result == "MISMATCH"

        if not mismatches(script):
            return script
        changed = True
        while changed:
            changed = False
            for candidate in _smaller(script):
                if mismatches(candidate):
                    script, changed = candidate, True
                    break
        return script


def _smaller(script: Script):
    statements = script.statements
    if script.prefix:
        yield replace(script, prefix="")
    for index in range(len(statements)):
        yield replace(script, statements=statements[:index] + statements[index + 1:])
    for index, statement in enumerate(statements):
        for position in range(1, len(statement)):
            shorter = statement[:position] + statement[position + 1:]
            yield replace(script, statements=statements[:index] + (shorter,) + statements[index + 1:])
    for position in range(len(script.arguments)):
        yield replace(script, arguments=script.arguments[:position] + script.arguments[position + 1:])


def _difference(bash: list, reader: list) -> str:
    if len(bash) != len(reader):
        return f"bash made {len(bash)} call(s), the reader {len(reader)}"
    index = next(i for i, (b, r) in enumerate(zip(bash, reader, strict=True)) if b != r)
    return f"call {index + 1} differs: bash {_shown_call(bash[index])}, reader {_shown_call(reader[index])}"


# --- the grammar -----------------------------------------------------------------------------------

SCALARS = ("A", "B", "C", "D")
UNSET = "U"  # never assigned
ARRAY = "R"
_CHARACTERS = "ab/ .-_=:*?[]#%~&\\'\"$\t\n{}@!,^xX"
_TYPICAL = ("", " ", "a b", "a/b/c", "/a/b/", "Qwen/Qwen2.5-7B", " a  b ", "a\nb", "a\n", "x*", "-n", "-e",
            "a\\tb", "~", "~/x", "*", "a:b", "a=b", "\t", "[ab]", "é", "a&b", "a'b", 'a"b', "$A")
_SAFE = "abxz019=./:_,@+-"  # unquoted literal characters with no meaning to bash here

values = st.one_of(st.sampled_from(_TYPICAL), st.text(st.sampled_from(_CHARACTERS), max_size=8))


def single_quoted(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def double_quoted_text(value: str) -> str:
    """``value`` as the text of a double-quoted string (no quotes around it)."""
    return re.sub(r'([\\"$`])', r"\\\1", value)


def ansi_c(value: str) -> str:
    return "$'" + value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\t", "\\t") + "'"


def backslashed(value: str) -> str:
    """Each character that is not plain escaped with a backslash (a newline quoted: a backslash-
    newline is a line continuation)."""
    out = []
    for character in value:
        if character == "\n":
            out.append("$'\\n'")
        elif character.isalnum() or character in "/.-_=:,@+":
            out.append(character)
        else:
            out.append("\\" + character)
    return "".join(out)


@st.composite
def quoted(draw, value=None) -> str:
    """A literal word giving exactly ``value`` (drawn when not given), quoted one of several ways."""
    value = draw(values) if value is None else value
    way = draw(st.sampled_from(("single", "double", "ansi", "backslash", "mixed")))
    if way == "single":
        return single_quoted(value)
    if way == "double":
        return '"' + double_quoted_text(value) + '"'
    if way == "ansi":
        return ansi_c(value)
    if way == "backslash":
        return backslashed(value) or "''"
    if len(value) < 2:
        return single_quoted(value)
    cut = draw(st.integers(1, len(value) - 1))
    return draw(quoted(value[:cut])) + draw(quoted(value[cut:]))


names = st.sampled_from(SCALARS + (UNSET, UNSET, "1", "2", "@", "*"))
scalar_names = st.sampled_from(SCALARS + (UNSET,))


@st.composite
def default_word(draw) -> str:
    """The word of ``${V:-word}`` and its kin: literals with blanks, expansions, quotes, ``~``."""
    parts = draw(st.lists(st.sampled_from((
        "a b", "x", " a ", "~", "~/d", "*", "a*", "$B", "${B}", '"$B"', "'x y'", '"a b"', "$C", "-", "a/b", "$1",
        '"$@"', "$@", "\\ ", "é")), max_size=3))
    return "".join(parts)


@st.composite
def pattern(draw, in_replace: bool) -> str:
    """A glob pattern as written in ``${V#p}`` (``in_replace``: ``${V/p/r}``'s, where ``/`` ends it)."""
    choices = ["a", "b", ".", "-", "*", "?", "[ab]", "[!a]", "[[:alpha:]]", "[[:space:]]", "\\/", "\\*", '"*"',
               "'*'", "$B", '"$B"', "x", " ", "\\ ", "\\\\", "é", "~"]
    if not in_replace:
        choices += ["/", "/*", "*/"]
    return "".join(draw(st.lists(st.sampled_from(choices), max_size=3)))


@st.composite
def replacement(draw) -> str:
    choices = ["x", "_", "/", "&", "\\&", '"&"', "'&'", "$B", '"$B"', "a b", "\\/", "-", "&&", "é"]
    return "".join(draw(st.lists(st.sampled_from(choices), max_size=3)))


@st.composite
def expansion(draw, name=None) -> str:
    """A parameter expansion of a scalar, an unset name, a positional parameter or ``$@``/``$*``."""
    name = draw(names) if name is None else name
    braced = f"{{{name}}}"
    if name in ("@", "*"):
        kind = draw(st.sampled_from(("plain", "braced", "length", "default")))
    else:
        kind = draw(st.sampled_from(("plain", "braced", "length", "default", "default", "trim", "trim", "replace",
                                     "replace", "case", "substring")))
    if kind == "plain":
        return f"${name}"
    if kind == "braced":
        return f"${braced}"
    if kind == "length":
        return f"${{#{name}}}"
    if kind == "default":
        operator = draw(st.sampled_from((":-", "-", ":+", "+") + ((":=", "=") if name in SCALARS + (UNSET,) else ())))
        return f"${{{name}{operator}{draw(default_word())}}}"
    if kind == "trim":
        operator = draw(st.sampled_from(("#", "##", "%", "%%")))
        return f"${{{name}{operator}{draw(pattern(False))}}}"
    if kind == "replace":
        operator = draw(st.sampled_from(("/", "//", "/#", "/%")))
        tail = draw(st.one_of(st.just(""), replacement().map(lambda r: "/" + r)))
        return f"${{{name}{operator}{draw(pattern(True))}{tail}}}"
    if kind == "case":
        return f"${{{name}{draw(st.sampled_from((',,', '^^', ',', '^')))}}}"
    offset = draw(st.sampled_from(("0", "1", "2", " -1", " -2", "(-3)", "9", "$((1+1))")))
    length = draw(st.sampled_from(("", ":0", ":1", ":2", ": -1", ":9")))
    return f"${{{name}:{offset}{length}}}"


@st.composite
def double_quoted(draw) -> str:
    parts = draw(st.lists(st.one_of(expansion(), values.map(double_quoted_text),
                                    st.sampled_from(("${R[@]}", "${R[*]}", "${R[1]}", "${#R[@]}", "$#", "$*"))),
                          min_size=1, max_size=3))
    return '"' + "".join(parts) + '"'


@st.composite
def word(draw) -> str:
    """A command's word: literals, quoted values, expansions (quoted or not), concatenated."""
    part = st.one_of(
        quoted(), st.text(st.sampled_from(_SAFE), min_size=1, max_size=4), expansion(), expansion(), double_quoted(),
        st.sampled_from(("${R[@]}", '"${R[@]}"', "${R[*]}", '"${R[*]}"', "${#R[@]}", "${R[0]}", "$#", '"$@"', "$*",
                         '"$*"', "$((N+1))")))
    return "".join(draw(st.lists(part, min_size=1, max_size=3)))


@st.composite
def assignment_value(draw) -> str:
    """The value of ``NAME=...``: a word with no unquoted blank outside ``${ }``."""
    part = st.one_of(quoted(), expansion(), double_quoted(), st.text(st.sampled_from(_SAFE), min_size=1, max_size=4),
                     st.sampled_from(("$(echo $B)", '"$(echo "$A")"', "$(printf %s $A)", "$(echo -n x y)",
                                      "$(printf '%s\\n' $A)", "$((N+1))", "~", "~/x", "a:~/b")))
    return "".join(draw(st.lists(part, max_size=3)))


def words_(count: int = 4):
    return st.lists(word(), max_size=count).map(tuple)


@st.composite
def test_expression(draw) -> str:
    subject = draw(st.sampled_from(("$A", '"$A"', "${B}", "$1", "x$C")))
    kind = draw(st.sampled_from(("[[==]]", "[[!=]]", "[[=~]]", "[=]", "[-n]", "[-z]", "test")))
    if kind in ("[[==]]", "[[!=]]"):
        return f"[[ {subject} {kind[2:4]} {draw(pattern(False)) or 'x'} ]]"
    if kind == "[[=~]]":
        regex = draw(st.sampled_from(("a$", "^a", "a", "^$", "a.b", "[ab]+$", "^/", "x|y", "a\\$", "'a b'", "(a|b)c")))
        return f"[[ {subject} =~ {regex} ]]"
    if kind == "[=]":
        return f'[ {subject} = {draw(word())} ]'
    if kind in ("[-n]", "[-z]"):
        return f"[ {kind[1:3]} {subject} ]"
    return f"test {subject} = {draw(word())}"


@st.composite
def statement(draw) -> tuple:
    kind = draw(st.sampled_from(("assign", "assign", "assign", "append", "array", "ifs", "set", "if", "case", "for",
                                 "function", "rec", "echo", "noglob", "continuation")))
    if kind == "assign":
        return (f"{draw(scalar_names)}={draw(assignment_value())}",)
    if kind == "append":
        return (f"{draw(st.sampled_from(SCALARS))}+={draw(assignment_value())}",)
    if kind == "array":
        operator = draw(st.sampled_from(("=", "+=")))
        return (f"{ARRAY}{operator}(" + " ".join(draw(words_(3))) + ")",)
    if kind == "ifs":
        return (draw(st.sampled_from(("IFS=''", "IFS=' '", "IFS=:", "IFS=/", "IFS=$' \\t\\n'", "IFS=' :'",
                                      "unset IFS", "IFS=$'\\n'", "IFS=a"))),)
    if kind == "set":
        return ("set", "--", *draw(words_(3)))
    if kind == "if":
        return (f"if {draw(test_expression())}; then rec then; else rec else; fi",)
    if kind == "case":
        arms = draw(st.lists(pattern(False).map(lambda p: p or "''"), min_size=1, max_size=3))
        body = " ".join(f"{arm}) rec case{index} ;;" for index, arm in enumerate(arms))
        return (f"case {draw(word())} in {body} *) rec other ;; esac",)
    if kind == "for":
        return (f"for x in {' '.join(draw(words_(3)))}; do rec \"$x\" $x; done",)
    if kind == "function":
        inner = draw(st.sampled_from(('rec "$@"', "rec $*", 'local L=$1; rec "$L" $L', 'rec "$#" "${1-u}" "$2"')))
        return (f"f() {{ {inner}; }}; f", *draw(words_(3)))
    if kind == "rec":
        return ("rec", *draw(words_()))
    if kind == "echo":
        return (f"{draw(scalar_names)}=$({draw(st.sampled_from(('echo', 'echo -n', 'printf %s', 'echo -e')))}",
                *draw(words_(3)), ")")
    if kind == "noglob":
        return (draw(st.sampled_from(("set -f", "set +f"))),)
    value = draw(st.sampled_from(("a\\\nb", "\"a\\\nb\"", "${A:-x\\\ny}", "x\\\n$A")))
    return ("rec", value)


@st.composite
def scripts(draw) -> Script:
    """One generated script: assignments of the scalars first (most of the time), statements, and a
    last call of ``rec`` or main_ppo with the words under test."""
    statements = []
    for name in SCALARS:
        if draw(st.integers(0, 3)):
            statements.append((f"{name}={draw(quoted())}",))
    if draw(st.booleans()):
        statements.append((f"{ARRAY}=(" + " ".join(draw(words_(3))) + ")",))
    if draw(st.integers(0, 4)) == 0:
        statements.append(("N=1",))
    statements += draw(st.lists(statement(), max_size=4))
    if draw(st.integers(0, 5)) == 3:
        keys = draw(st.lists(st.sampled_from(("trainer.experiment_name", "data.train_files", "k")), min_size=1,
                             max_size=3))
        statements.append((MAIN_PPO, *(f"{key}={draw(word())}" for key in keys)))
    else:
        statements.append(("rec", *draw(words_())))
    arguments = tuple(draw(st.lists(values, max_size=3)))
    prefix = "\ufeff" if draw(st.integers(0, 60)) == 29 else ""  # rare (Hypothesis favours the bounds)
    return Script(tuple(statements), arguments, prefix)


def batches(size: int = BATCH):
    return st.lists(scripts(), min_size=size, max_size=size)


# --- hunting ---------------------------------------------------------------------------------------

@dataclass
class Tally:
    """What a hunt judged: counts by result, the mismatches (minimal scripts) by their reason."""

    counts: dict = field(default_factory=dict)
    mismatches: list = field(default_factory=list)

    def add(self, outcomes: Sequence[Outcome]) -> list:
        for outcome in outcomes:
            self.counts[outcome.result] = self.counts.get(outcome.result, 0) + 1
        return [outcome for outcome in outcomes if outcome.result == "MISMATCH"]

    def __str__(self) -> str:
        total = sum(self.counts.values())
        return f"{total} scripts: " + ", ".join(f"{count} {result}" for result, count in sorted(self.counts.items()))


def hunt(judge: Judge, batch_count: int, random_seed: Optional[int], tally: Tally, on_mismatch=None,
         derandomize: bool = False) -> None:
    """``batch_count`` batches drawn by Hypothesis (generation only; no shrinking of its own), each
    judged; every mismatch minimized and handed to ``on_mismatch`` (the Outcome of the minimal script)."""
    @settings(max_examples=batch_count, derandomize=derandomize, phases=[Phase.generate], database=None,
              deadline=None, suppress_health_check=list(HealthCheck))
    @given(batch=batches())
    def run(batch):
        for outcome in tally.add(judge.judge(batch)):
            minimal = judge.minimize(outcome.script)
            (found,) = judge.judge([minimal])
            if found.result != "MISMATCH":  # did not mismatch alone (a record told apart wrongly)
                found = outcome
            tally.mismatches.append(found)
            if on_mismatch is not None:
                on_mismatch(found)

    if random_seed is not None and not derandomize:
        run = seed(random_seed)(run)
    run()


def _cpu() -> float:
    """CPU seconds of this process and its finished children (bash, the stand-ins)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", type=float, default=60.0, metavar="SECONDS", help="hunt this long (default 60)")
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis's seed (default: a random one)")
    parser.add_argument("--batch", type=int, default=20, help="batches between reports of progress")
    parser.add_argument("files", nargs="*", help="judge these scripts instead of hunting")
    args = parser.parse_args(argv)
    tally, start, cpu_start = Tally(), time.monotonic(), _cpu()
    with Judge() as judge:
        if args.files:
            for path in args.files:
                (outcome,) = judge.judge([Script.from_file(Path(path))])
                tally.add([outcome])
                print(f"{path}: {outcome.result} {outcome.reason}")
                if outcome.result == "MISMATCH":
                    print(outcome.report(judge.errors(outcome.script)))
            print(tally)
            return 1 if tally.counts.get("MISMATCH") else 0
        random_seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
        print(f"seed {random_seed}", flush=True)
        seen: set = set()

        def report(outcome: Outcome) -> None:
            key = outcome.script.text
            if key not in seen:
                seen.add(key)
                print(f"\n{outcome.report(judge.errors(outcome.script))}\n", flush=True)

        round_ = 0
        while time.monotonic() - start < args.long:
            hunt(judge, args.batch, random_seed + round_, tally, report)
            round_ += 1
            elapsed, cpu = time.monotonic() - start, _cpu() - cpu_start
            total = sum(tally.counts.values())
            print(f"{tally} in {elapsed:.0f} s, {cpu:.0f} s of CPU with bash's ({3600 * total / elapsed:.0f} an hour; "
                  f"{3600 * total / max(cpu, 1e-9):.0f} an hour of one core)", flush=True)
    print(f"{tally}; {len(seen)} distinct minimal mismatches")
    return 1 if seen else 0


if __name__ == "__main__":
    sys.exit(main())
