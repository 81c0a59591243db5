"""A bash script evaluated without running it (docs/contract.md section 6.5, "What the reader
models"): the statements, expansions and state of bash 5 for the constructs listed there, each
computed exactly; every other construct is ``ReadError`` (check's exit 2 naming the line). Every
command the reader does not evaluate itself is handed to ``on_command``, which answers without
running it. A value nothing here can know (an unknown command's output, ``$RANDOM``) is a
one-character marker (``unknown``); control flow that such a value decides is ``ReadError``
unless no branch changes anything this reading tracks. The reading's state (variables,
attributes, functions, options, positional parameters, traps, directory) is one ``State``,
copied for subshells, ``$( )`` and pipeline parts and restored after them as bash scopes them.
Nothing is executed, written or opened other than the script and the files it sources.

This module holds ``Shell``: the reading's counters and records, its public interface (markers,
notes, refusals, the subshell scope) and the composition of its parts, one concept a module:
``statements`` (control flow), ``commands`` (simple commands, calls, ``$( )``), ``expansion``
(words to fields), ``parameters`` (``${...}``), ``conditions`` (``[[ ]]`` and arithmetic),
``variables`` (assignment, lookup, scoping), ``syntax`` (questions about tree-sitter's nodes)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from verl_rfpp.bash_reader import parse
from verl_rfpp.bash_reader.commands import Commands
from verl_rfpp.bash_reader.conditions import Conditions
from verl_rfpp.bash_reader.expansion import Expansion
from verl_rfpp.bash_reader.parameters import Parameters
from verl_rfpp.bash_reader.parse import ReadError, construct, line
from verl_rfpp.bash_reader.state import Answer, Command, Exit, State, Status, scalar
from verl_rfpp.bash_reader.statements import LOOP_LIMIT, STEP_LIMIT, Statements
from verl_rfpp.bash_reader.variables import BASH_OWN, STARTUP_VARIABLES, Variables

__all__ = ["Answer", "Command", "LOOP_LIMIT", "STEP_LIMIT", "STARTUP_VARIABLES", "Shell"]

_FIRST_MARKER = 0xF0000  # Unicode's private-use plane 15: never in a script's own text


class Shell(Statements, Commands, Expansion, Parameters, Conditions, Variables):
    """The reading of one script: ``read()`` evaluates it, calling ``on_command`` for every command
    it does not evaluate itself; ``unknowns`` maps each marker to (line, construct).

    Its parts (the base classes), ``builtins`` and ``child`` use only public names: the records
    and markers below, the ``State``, and the counters bash's rules read (``loop_depth`` for
    ``break``, ``source_depth`` for ``return``, ``negations`` for ``set -e``, ``captured`` for a
    ``$( )``'s output, ``stdin_fed`` for a here-document); each part's docstring names its own."""

    def __init__(self, script: Path, arguments: Sequence[str], environ: Mapping[str, str],
                 on_command: Callable[[Shell, Command], Answer], cwd: str = "", invoked_as: str = ""):
        self.script = Path(script)
        self.invoked_as = invoked_as or str(script)
        self.on_command = on_command
        self.unknowns: dict = {}
        self.exported_at: dict = {}
        self.assumptions: list = []
        self.steps = 0
        self.written: set = set()  # paths the script sends output to ("" : one check cannot name)
        found = sorted(name for name in STARTUP_VARIABLES if name in environ)
        found += sorted(name for name in environ if name.startswith("BASH_FUNC_"))
        if found:
            raise ReadError(1, found[0], "this variable of check's environment changes how bash reads the script; "
                            "unset it for the check (env -u NAME verl-rfpp check ...)")
        start = {name: value for name, value in environ.items() if name not in BASH_OWN}
        self.state = State(variables=dict(start), exported=set(start), positional=list(arguments),
                           cwd=cwd or os.getcwd())
        self.status: Status = 0
        self.held = sum(len(value) for value in start.values())
        self.captured: Optional[list] = None  # collecting a command substitution's output
        self.ignore_errexit = 0  # inside a condition, a && list's left side, a negation
        self.negations = 0  # inside a negation (!)
        self.loop_depth = 0
        self.call_depth = 0
        self.source_depth = 0
        self.unset_own: set = set()  # bash's own variables the script unset (whether set is then not known)
        self.temporary: list = []  # the names of each ``A=1 f`` binding in force, innermost last
        self.files = [self.invoked_as]  # BASH_SOURCE reversed: the script, each source, each call's file
        self.defined_in: dict = {}  # a function's body -> the file that defined it
        self.node_line = 1
        self.stdin_fed = False
        self.substitution_status: Optional[list] = None

    # --- entry points -----------------------------------------------------------------------------

    def read(self) -> Status:
        """Evaluate the whole script; its exit status as far as known."""
        try:
            self.source_file(str(self.script), None)
            status = self.status
        except Exit as stop:
            status = stop.status
        self.check_traps()
        return status

    def unknown(self, node, what: str = "") -> str:
        """A new marker for a value that is not known without running ``node``."""
        marker = chr(_FIRST_MARKER + len(self.unknowns))
        self.unknowns[marker] = (line(node) if node is not None else self.node_line, what or construct(node))
        return marker

    def shown(self, value: str) -> str:
        """``value`` with each marker written as the construct it stands for, printable."""
        for marker, (_, written) in self.unknowns.items():
            value = value.replace(marker, written)
        return parse.printable(value)

    def is_unknown(self, value: str) -> bool:
        return any(_FIRST_MARKER <= ord(character) < _FIRST_MARKER + len(self.unknowns) for character in value)

    def environment(self, extra: Mapping[str, str] = ()) -> dict:
        """The environment a command started now would get (``extra``: its own assignments)."""
        variables = self.state.variables
        found = {name: scalar(variables[name]) for name in self.state.exported if name in variables}
        found.update(extra)
        return found

    def note(self, node, what: str) -> None:
        """Record an assumption about ``node`` (the caller of ``Shell`` prints them)."""
        where = line(node) if node is not None else self.node_line
        written = construct(node) if node is not None else ""
        self.assumptions.append(f"{self.script.name}:{where}: `{written}` {what}")

    def refuse(self, node, why: str) -> ReadError:
        return ReadError(line(node) if node is not None else self.node_line,
                         construct(node) if node is not None else "", why)

    @property
    def variables(self) -> dict:
        return self.state.variables

    @property
    def positional(self) -> list:
        return self.state.positional

    @property
    def cwd(self) -> str:
        return self.state.cwd

    # --- scopes -----------------------------------------------------------------------------------

    def in_subshell(self, run: Callable[[], Status], errexit: bool = True) -> Status:
        """``run()`` in a copy of the state (a subshell, ``$( )``, a pipeline part, ``&``): what it
        changes is dropped after; its ``exit`` ends only it. ``errexit=False``: ``set -e`` off
        inside (bash's command substitutions)."""
        saved, held = self.state, self.held
        self.state = saved.copy()
        self.state.traps = {}
        if not errexit:
            self.state.options.discard("errexit")
        loops, self.loop_depth = self.loop_depth, 0
        try:
            return run()
        except Exit as stop:
            return stop.status
        finally:
            self.state, self.held, self.loop_depth = saved, held, loops

