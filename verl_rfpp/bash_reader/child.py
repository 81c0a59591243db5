"""A script that a script starts (docs/contract.md section 6.5, "Scripts that start scripts"):
``bash FILE ARGS`` (or ``/bin/bash``, ``env bash``, a file with a bash ``#!`` line or none) is read
as bash reads it, by a new ``Shell``: ``$0`` is FILE as given, ``$1``... the arguments, and it
starts from the environment the command gets (the parent's exported variables and the command's
own assignments; no unexported variable, function, option, trap or array of the parent); its
commands are answered by the parent's ``on_command``, so every main_ppo run it starts is a run of
the reading, in order; its exit status is the command's, its output the command's output; nothing
it changes reaches the parent but the files it may write. What the reading cannot follow is
``ReadError`` (check's exit 2) naming the parent's line and the child's: ``sh``/``dash`` (dash is
not bash), a file missing or unreadable here, bash options other than ``-e``, ``-u``, ``-x``,
``-v``, ``-f``, ``-o NAME``, ``--norc``, ``--noprofile``, ``--``, and startups that read other
files (``BASH_ENV``, exported ``SHELLOPTS``/``BASHOPTS``). Bounded as sources are: at most
``MAX_CHILD_DEPTH`` nested, the parent's step and value budgets shared."""

from __future__ import annotations

import os
import re
from typing import Optional, Sequence

from verl_rfpp.bash_reader import parse
from verl_rfpp.bash_reader.parse import ReadError
from verl_rfpp.bash_reader.shell import STARTUP_VARIABLES, Shell
from verl_rfpp.bash_reader.state import SET_FLAGS, SET_OPTIONS, Answer, Command

MAX_CHILD_DEPTH = 10
SHELLS = frozenset({"bash", "sh", "dash"})
_FLAGS = set("euxvf")  # bash's own options a child is read with (as `set -e`, ...)
_IGNORED = {"--norc", "--noprofile"}  # they matter only to an interactive shell


class Child(Shell):
    """The reading of a script another one starts; ``place``: its path as shown in check's lines."""

    def __init__(self, parent: Shell, path: str, place: str, invoked_as: str, arguments: Sequence[str],
                 environ: dict):
        super().__init__(path, arguments, environ, parent.on_command, cwd=parent.cwd, invoked_as=invoked_as)
        self.place = place
        self.depth = depth(parent) + 1
        self.unknowns = parent.unknowns  # one table of markers: the child's values reach the parent's runs
        self.assumptions = parent.assumptions
        self.written = parent.written
        self.steps = parent.steps
        self.held += parent.held

    def unknown(self, node, what: str = "") -> str:
        """A marker in the parent's table, its line named ``FILE:LINE`` (check's lines name the child)."""
        marker = super().unknown(node, what)
        line, construct = self.unknowns[marker]
        self.unknowns[marker] = (f"{self.place}:{line}", construct)
        return marker

    def note(self, node, what: str) -> None:
        line = parse.line(node) if node is not None else self.node_line
        written = parse.construct(node) if node is not None else ""
        self.assumptions.append(f"{self.place}:{line}: `{written}` {what}")


def depth(reader: Shell) -> int:
    return getattr(reader, "depth", 0)


def place(reader: Shell) -> str:
    """The path check names a line of ``reader`` by ("" for the script check was given)."""
    return getattr(reader, "place", "")


def where(reader: Shell, line: int) -> str:
    """``FILE:LINE`` of a line of ``reader`` as its notes name it."""
    return f"{place(reader) or reader.script.name}:{line}"


def shell_of(program: str) -> Optional[str]:
    """``bash``, ``sh`` or ``dash`` when ``program`` (a name or a path) is that shell."""
    name = os.path.basename(program)
    return name if name in SHELLS else None


def options(words: Sequence[str], line: int, shown: str) -> tuple[set, int]:
    """bash's options before its FILE (``-e``, ``-eu``, ``-o pipefail``, ``--``, ...): the ``set``
    options they give and the index of FILE. ``ReadError`` for an option check does not model."""
    found, index = set(), 0
    while index < len(words) and words[index].startswith(("-", "+")):
        word = words[index]
        if word in ("--", "-"):
            return found, index + 1
        if word in _IGNORED:
            index += 1
        elif word == "-o" and index + 1 < len(words) and words[index + 1] in SET_OPTIONS - {"noexec"}:
            found.add(words[index + 1])
            index += 2
        elif re.fullmatch(r"-[a-z]+", word) and set(word[1:]) <= _FLAGS:
            found.update(SET_FLAGS[letter] for letter in word[1:])
            index += 1
        else:
            raise ReadError(line, shown, f"check does not model bash's option {word} (it reads -e, -u, -x, -v, -f, "
                                         "-o NAME, --norc, --noprofile)")
    return found, index


def read_child(parent: Shell, command: Command, shell: str, file: str, arguments: Sequence[str], flags: set,
        environment: dict) -> Answer:
    """Read ``FILE`` as ``shell`` started by ``command`` of ``parent`` would, with ``arguments``,
    ``flags`` (``set`` options) and ``environment``; its status and output."""
    shown = parent.shown(" ".join(command.words))[:80]
    if shell != "bash":
        raise ReadError(command.line, shown, f"{shell} is not bash (on Debian and Ubuntu /bin/sh is dash, which reads "
                                             "echo, test, shift and arithmetic otherwise): check reads bash only; "
                                             "start it with bash, or check the script on its own")
    if parent.is_unknown(file) or parent.is_unknown(parent.cwd):
        raise ReadError(command.line, shown, "the script this starts is not known")
    if depth(parent) >= MAX_CHILD_DEPTH:
        raise ReadError(command.line, shown, f"scripts start scripts deeper than {MAX_CHILD_DEPTH}")
    path = os.path.normpath(os.path.join(parent.cwd, file))
    if path in parent.written or "" in parent.written:
        raise ReadError(command.line, shown, "this starts a file the script may have written")
    if not os.path.isfile(path):
        found = "here" if "/" in file else "here (bash then searches PATH for it)"
        raise ReadError(command.line, shown, f"{file} is not a file {found}; check cannot read the script this starts")
    exported = sorted(name for name in ("SHELLOPTS", "BASHOPTS") if name in parent.state.exported)
    exported += sorted(name for name in STARTUP_VARIABLES if name in environment)
    arrays = sorted(name for name in parent.state.exported if isinstance(parent.variables.get(name), list))
    if arrays:
        raise ReadError(command.line, shown, f"the array {arrays[0]} is exported: bash does not give arrays to the "
                                             "script it starts, and check does not model that")
    if exported:
        raise ReadError(command.line, shown, f"the script is started with {exported[0]} exported, which changes how "
                                             "bash starts; check does not model it")
    parent.assumptions.append(f"{where(parent, command.line)}: `{shown}` starts {file}, read from this machine (the "
                              "run's machine is assumed to have the same file)")
    shown_path = os.path.relpath(path) if path.startswith(os.getcwd() + os.sep) else path
    child = Child(parent, path, shown_path, file, list(arguments), environment)
    child.state.options.update(flags)
    child.stdin_fed = command.stdin_fed
    if parent.captured is not None:
        child.captured = []
    try:
        status = child.read()
    except ReadError as error:
        raise ReadError(command.line, shown, f"{error.why}, in {shown_path}:{error.line}: {error.construct}; it is "
                                             "started by this line") from None
    finally:
        parent.steps = child.steps
    output = None
    if child.captured is not None:
        output = None if any(piece is None for piece in child.captured) else "".join(child.captured)
    return Answer(status, output)


def first_line(path: str) -> Optional[str]:
    """The ``#!`` line of a file here (``""``: a text file without one; ``None``: not a readable
    text file, a binary among them)."""
    try:
        data = parse.read_bytes(path)
    except ReadError:
        return None
    if b"\0" in data[:4096]:
        return None
    head = data.split(b"\n", 1)[0]
    return head[2:].decode(errors="surrogateescape").strip() if head.startswith(b"#!") else ""
