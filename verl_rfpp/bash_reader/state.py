"""The reader's state and records (docs/contract.md section 6.5): ``State``, what a subshell
copies; ``Command`` and ``Answer``, a command handed to ``on_command`` and its answer; the
exceptions that carry ``exit``, ``return``, ``break`` and ``continue``; the options ``set`` and
``shopt`` may change; ``Several``, the words of ``$@``, ``$*`` and ``${a[@]}``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

Status = Optional[int]  # None: not known without running the command

# ``set``'s flags and ``-o`` names the reader models; ``shopt`` options that change nothing it reads.
SET_FLAGS = {"e": "errexit", "u": "nounset", "x": "xtrace", "v": "verbose", "n": "noexec", "f": "noglob",
             "E": "errtrace", "T": "functrace"}
SET_OPTIONS = set(SET_FLAGS.values()) | {"pipefail"}
SHOPT_HARMLESS = {"extglob", "checkwinsize", "histappend", "globasciiranges", "sourcepath", "cmdhist", "progcomp",
                  "interactive_comments", "promptvars", "extquote", "complete_fullquote", "force_fignore",
                  "hostcomplete"}


class Exit(Exception):
    """``exit N`` (or the end ``set -e``/``set -u`` bring): ``status``, ``None`` when unknown."""

    def __init__(self, status: Status):
        self.status = status


class Return(Exit):
    """``return N`` from a function or a sourced file."""


class LoopControl(Exception):
    """``break N``/``continue N``: ``kind`` and how many loops it leaves."""

    def __init__(self, kind: str, levels: int):
        self.kind, self.levels = kind, levels


@dataclass(frozen=True)
class Command:
    """A simple command the reader does not evaluate itself: its words after expansion (unknown
    parts as markers), its line, the environment it would get, and whether its stdin is fed by
    the script (here-document, here-string)."""

    words: tuple[str, ...]
    line: int
    environment: Mapping[str, str]
    stdin_fed: bool = False


@dataclass
class Answer:
    """What ``on_command`` says a command does: its exit status and output (``None``: unknown)."""

    status: Status = None
    output: Optional[str] = None


@dataclass
class State:
    """What a subshell copies and its parent keeps: bash's shell state as the reader tracks it."""

    variables: dict = field(default_factory=dict)
    exported: set = field(default_factory=set)
    readonly: set = field(default_factory=set)
    functions: dict = field(default_factory=dict)
    options: set = field(default_factory=set)
    positional: list = field(default_factory=list)
    cwd: str = ""
    traps: dict = field(default_factory=dict)
    locals: list = field(default_factory=list)  # one {name: saved value or None} per function call

    def copy(self) -> State:
        """An independent copy (the syntax nodes of functions are shared: they never change)."""
        variables = {name: list(value) if isinstance(value, list) else value for name, value in self.variables.items()}
        return State(variables, set(self.exported), set(self.readonly), dict(self.functions), set(self.options),
                     list(self.positional), self.cwd, dict(self.traps), [dict(scope) for scope in self.locals])


def scalar(value) -> str:
    """A variable's value as a word (an array's first element, as ``$a`` gives it)."""
    return (value[0] if value else "") if isinstance(value, list) else value


@dataclass
class Several:
    """``$@``, ``$*``, ``${a[@]}``: several words; ``joined``: ``$*``/``[*]`` (one word when quoted)."""

    items: list
    joined: bool = False
