"""A bash script evaluated without running it (docs/contract.md section 6.5, "What the reader
models"): the statements, expansions and state of bash 5 for the constructs listed there, each
computed exactly; every other construct is ``ReadError`` (check's exit 2 naming the line). Every
command the reader does not evaluate itself is handed to ``on_command``, which answers without
running it. A value nothing here can know (an unknown command's output, ``$RANDOM``) is a
one-character marker (``unknown``); control flow that such a value decides is ``ReadError``
unless no branch changes anything this reading tracks. The reading's state (variables,
attributes, functions, options, positional parameters, traps, directory) is one ``State``,
copied for subshells, ``$( )`` and pipeline parts and restored after them as bash scopes them.
Nothing is executed, written or opened other than the script and the files it sources."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from verl_rfpp.bash_reader import arithmetic, builtins, parse, words
from verl_rfpp.bash_reader.parse import ReadError, construct, line, text
from verl_rfpp.bash_reader.state import Answer, Command, Exit, LoopControl, Return, State, Status, scalar
from verl_rfpp.bash_reader.words import BREAK, Piece, Unsupported

_FIRST_MARKER = 0xF0000  # Unicode's private-use plane 15: never in a script's own text
LOOP_LIMIT = 5000
STEP_LIMIT = 20000
MAX_CALL_DEPTH = 50
MAX_VALUE = 1 << 16  # characters in one value
MAX_HELD = 1 << 24  # characters in all values together
MAX_FIELDS = 10000  # fields of one command or list

# Variables bash sets itself: never taken from check's environment. Reading one the script did
# not assign is an unknown value (or, for these three, computed: LINENO, PWD, IFS's default).
BASH_OWN = frozenset({
    "BASH", "BASHOPTS", "BASHPID", "BASH_ALIASES", "BASH_ARGC", "BASH_ARGV", "BASH_ARGV0", "BASH_CMDS",
    "BASH_COMMAND", "BASH_EXECUTION_STRING", "BASH_LINENO", "BASH_REMATCH", "BASH_SOURCE", "BASH_SUBSHELL",
    "BASH_VERSINFO", "BASH_VERSION", "COLUMNS", "COMP_WORDBREAKS", "DIRSTACK", "EPOCHREALTIME", "EPOCHSECONDS",
    "EUID", "FUNCNAME", "GROUPS", "HISTCMD", "HISTFILE", "HISTFILESIZE", "HISTSIZE", "HOSTNAME", "HOSTTYPE",
    "IFS", "LINENO", "LINES", "MACHTYPE", "MAILCHECK", "OLDPWD", "OPTARG", "OPTERR", "OPTIND", "OSTYPE",
    "PIPESTATUS", "PPID", "PS1", "PS2", "PS4", "PWD", "RANDOM", "SECONDS", "SHELLOPTS", "SHLVL", "SRANDOM",
    "UID", "_"})
# Of ``BASH_OWN``, those bash running a script file always sets (whatever its environment), and
# those it never sets at the start; the others depend on the environment (``OLDPWD``, ``COLUMNS``, ...)
# or the context (``FUNCNAME``), and whether they are set is not known (measured with bash 5.2).
ALWAYS_SET = frozenset({
    "BASH", "BASHOPTS", "BASHPID", "BASH_ARGC", "BASH_ARGV0", "BASH_COMMAND", "BASH_LINENO", "BASH_SOURCE",
    "BASH_SUBSHELL", "BASH_VERSINFO", "BASH_VERSION", "COMP_WORDBREAKS", "DIRSTACK", "EPOCHREALTIME",
    "EPOCHSECONDS", "EUID", "GROUPS", "HISTCMD", "HOSTNAME", "HOSTTYPE", "IFS", "LINENO", "MACHTYPE", "OPTERR",
    "OPTIND", "OSTYPE", "PIPESTATUS", "PPID", "PS4", "PWD", "RANDOM", "SECONDS", "SHELLOPTS", "SHLVL", "SRANDOM",
    "UID", "_"})
NEVER_SET = frozenset({"BASH_EXECUTION_STRING", "PS1", "PS2"})
# Assigning these changes how bash behaves, or bash refuses it: the reader refuses it.
_SPECIAL_ASSIGNMENTS = BASH_OWN - {"IFS", "HOSTNAME", "OLDPWD", "PS1", "PS2", "PS4", "COLUMNS", "LINES",
                                   "HISTFILE", "HISTFILESIZE", "HISTSIZE", "MAILCHECK", "OPTERR", "_"} | {
    "CDPATH", "GLOBIGNORE", "POSIXLY_CORRECT", "BASH_ENV", "ENV", "BASH_XTRACEFD", "BASH_COMPAT"}
# In the environment bash starts from, these change how it reads the script.
STARTUP_VARIABLES = ("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "POSIXLY_CORRECT", "CDPATH", "GLOBIGNORE",
                     "BASH_COMPAT", "BASH_XTRACEFD")
# What a branch may hold and still change nothing the reading tracks (an unknown test may skip it).
_STATEFUL_NODES = {"variable_assignment", "variable_assignments", "declaration_command", "unset_command",
                   "function_definition"}
# Programs an unknown test may skip when their words hold expansions: they start nothing of the run's.
_HARMLESS_COMMANDS = {"echo", "printf", ":", "true", "false", "sleep", "mkdir", "rm", "touch", "ls", "cat", "date",
                      "nvidia-smi", "hostname", "wait", "kill", "pkill", "wandb", "pip", "pip3", "wget", "curl",
                      "git", "logger", "test", "[", "grep", "cp", "mv", "ln", "chmod", "df", "free", "nproc"}
_STATEFUL_COMMANDS = {"cd", "shift", "set", "source", ".", "eval", "exit", "return", "export", "local", "declare",
                      "typeset", "readonly", "exec", "break", "continue", "read", "unset", "pushd", "popd", "trap",
                      "shopt", "getopts", "let", "alias", "mapfile", "readarray", "enable", "unalias", "builtin",
                      "command"}


@dataclass
class _All:
    """``$@``, ``$*``, ``${a[@]}``: several words; ``joined``: ``$*``/``[*]`` (one word when quoted)."""

    items: list
    joined: bool = False


class Shell:
    """The reading of one script: ``read()`` evaluates it, calling ``on_command`` for every command
    it does not evaluate itself; ``unknowns`` maps each marker to (line, construct)."""

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
        self._output: Optional[list] = None  # collecting a command substitution's output
        self._ignore_errexit = 0  # inside a condition, a && list's left side, a negation
        self._negations = 0  # inside a negation (!)
        self._loops = 0
        self._calls = 0
        self._sources = 0
        self._unset_own: set = set()  # bash's own variables the script unset (whether set is then not known)
        self._temporary: list = []  # the names of each ``A=1 f`` binding in force, innermost last
        self.files = [self.invoked_as]  # BASH_SOURCE reversed: the script, each source, each call's file
        self._defined_in: dict = {}  # a function's body -> the file that defined it
        self._node_line = 1
        self._stdin_fed = False
        self._substitution_status: Optional[list] = None

    # --- entry points -------------------------------------------------------------------------

    def read(self) -> Status:
        """Evaluate the whole script; its exit status as far as known."""
        try:
            self._source_file(str(self.script), None)
            status = self.status
        except Exit as stop:
            status = stop.status
        self._check_traps()
        return status

    def unknown(self, node, what: str = "") -> str:
        """A new marker for a value that is not known without running ``node``."""
        marker = chr(_FIRST_MARKER + len(self.unknowns))
        self.unknowns[marker] = (line(node) if node is not None else self._node_line, what or construct(node))
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
        where = line(node) if node is not None else self._node_line
        written = construct(node) if node is not None else ""
        self.assumptions.append(f"{self.script.name}:{where}: `{written}` {what}")

    def refuse(self, node, why: str) -> ReadError:
        return ReadError(line(node) if node is not None else self._node_line,
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

    # --- scopes -------------------------------------------------------------------------------

    def in_subshell(self, run: Callable[[], Status], errexit: bool = True) -> Status:
        """``run()`` in a copy of the state (a subshell, ``$( )``, a pipeline part, ``&``): what it
        changes is dropped after; its ``exit`` ends only it. ``errexit=False``: ``set -e`` off
        inside (bash's command substitutions)."""
        saved, held = self.state, self.held
        self.state = saved.copy()
        self.state.traps = {}
        if not errexit:
            self.state.options.discard("errexit")
        loops, self._loops = self._loops, 0
        try:
            return run()
        except Exit as stop:
            return stop.status
        finally:
            self.state, self.held, self._loops = saved, held, loops

    # --- statements ---------------------------------------------------------------------------

    def _source_file(self, path: str, node) -> None:
        data = parse.read_bytes(path)
        root = parse.parse_script(data, path)
        self._block(root.children)

    def _block(self, nodes) -> None:
        nodes = list(nodes)
        for index, node in enumerate(nodes):
            if not node.is_named or node.type in ("comment", "heredoc_body"):
                continue
            following = nodes[index + 1] if index + 1 < len(nodes) else None
            if following is not None and following.is_named and following.type not in ("comment", "heredoc_body") \
                    and _gap_parts(_gap(node, following) if _gap(node, following) is not None else b"?") is not None:
                raise self.refuse(node, "tree-sitter-bash ends this statement inside a word (an escaped character "
                                        "after a quote, a backslash-newline); bash goes on")
            if index + 1 < len(nodes) and nodes[index + 1].type == "&":
                self.in_subshell(lambda node=node: self._statement(node))
                self.status = 0
                continue
            self.status = self._statement(node)
            if "noexec" in self.state.options:
                raise Exit(0)

    def _statement(self, node) -> Status:
        self.steps += 1
        if self.steps > STEP_LIMIT:
            raise self.refuse(node, f"reading the script takes over {STEP_LIMIT} steps")
        self._node_line = line(node)
        if _misparsed(node):
            return self._reparsed(node)
        handler = getattr(self, f"_do_{node.type}", None)
        if handler is None:
            raise self.refuse(node, f"check does not evaluate bash's {node.type.replace('_', ' ')}")
        try:
            status = handler(node)
        except Unsupported as error:
            raise self.refuse(node, f"check does not model {error}") from None
        return self._errexit(node, status)

    def _errexit(self, node, status: Status) -> Status:
        """``set -e``: a command that fails outside a condition ends the shell (bash's rules: not in
        a test, a ``&&``/``||`` list's left side, ``!``; compound commands other than subshells
        never end it themselves). An unknown status is taken as success, and said so."""
        triggers = node.type in ("command", "test_command", "subshell", "pipeline", "variable_assignment",
                                 "variable_assignments", "declaration_command", "unset_command") or (
            node.type == "compound_statement" and text(node).startswith("(("))
        if "errexit" not in self.state.options or self._ignore_errexit or not triggers or status == 0:
            return status
        if status is None:
            self.note(node, "succeeds (set -e: not run, its exit status is assumed 0)")
            return 0
        raise Exit(status)

    def _ignoring_errexit(self, node) -> Status:
        self._ignore_errexit += 1
        try:
            return self._statement(node)
        finally:
            self._ignore_errexit -= 1

    def _reparsed(self, node) -> Status:
        """A statement tree-sitter-bash splits at a ``$name`` after ``/$name/`` (its grammar takes
        ``a=$X/$y/$z`` for a command): read again with ``${name}``, which bash expands the same."""
        fixed = _braced(text(node))
        source = ("\n" * node.start_point[0] + fixed).encode(errors="surrogateescape")
        root = parse.parse_script(source, str(self.script))
        statements = [child for child in root.named_children if child.type != "comment"]
        if any(_misparsed(child) for child in statements):
            raise self.refuse(node, "tree-sitter-bash cannot parse this statement")
        for child in statements:
            self.status = self._statement(child)
        return self.status

    def _do_variable_assignment(self, node) -> Status:
        return self._assignments([node])

    def _do_variable_assignments(self, node) -> Status:
        return self._assignments(node.named_children)

    def _assignments(self, nodes) -> Status:
        """Assignments alone: their status is the last command substitution's in them, else 0."""
        saved, self._substitution_status = self._substitution_status, []
        try:
            for child in nodes:
                self._assign(child)
            found = self._substitution_status
        finally:
            self._substitution_status = saved
        return found[-1] if found else 0

    def _do_function_definition(self, node) -> Status:
        name = text(node.child_by_field_name("name"))
        body = node.child_by_field_name("body")
        self.state.functions[name] = body
        self._defined_in[body] = self.files[-1]
        return 0

    def _do_compound_statement(self, node) -> Status:
        if text(node).startswith("(("):
            value = self._arithmetic(node, *self._inside(node))
            return None if value is None else int(value == 0)
        self._block(node.children)
        return self.status

    def _do_subshell(self, node) -> Status:
        return self.in_subshell(lambda: self._block_status(node.children))

    def _block_status(self, nodes) -> Status:
        self._block(nodes)
        return self.status

    def _do_negated_command(self, node) -> Status:
        self._negations += 1
        try:
            status = self._ignoring_errexit(node.named_children[-1])
        finally:
            self._negations -= 1
        return None if status is None else int(status == 0)

    def _do_list(self, node) -> Status:
        left, operator, right = node.children[0], node.children[1].type, node.children[2]
        status = self._ignoring_errexit(left)
        if status is None:
            if _inert(right, self.state.functions):
                self.emit(None)  # what it prints, if it runs, is not known
                return None
            if operator == "&&" and not _is_test(left):
                self.note(left, "succeeds (not run; the command after && is read)")
                status = 0
            else:
                raise self.refuse(left, "the exit status of this command decides what runs next, and check does "
                                        "not run it")
        if (status == 0) == (operator == "&&"):
            return self._statement(right)
        return status

    def _do_pipeline(self, node) -> Status:
        parts = [child for child in node.named_children]
        statuses = []
        saved = self._output
        self._output = None if saved is None else []  # each part's output feeds the next, not the caller
        try:
            for part in parts:
                statuses.append(self.in_subshell(lambda part=part: self._statement(part)))
        finally:
            self._output = saved
        self.emit(None)  # what the last part prints depends on what it reads
        if "pipefail" not in self.state.options:
            return statuses[-1]
        for status in reversed(statuses):
            if status is None:
                return None
            if status != 0:
                return status
        return 0

    def _do_redirected_statement(self, node) -> Status:
        body = node.child_by_field_name("body")
        redirects = [child for child in node.named_children if child is not body]
        redirects += [inner for r in redirects if r.type == "heredoc_redirect" for inner in r.named_children
                      if inner.type == "file_redirect"]  # cat <<EOF > FILE
        fed = any(r.type in ("heredoc_redirect", "herestring_redirect") for r in redirects)
        for redirect in redirects:
            self._record_write(redirect)
        if body is None:
            return 0
        saved = self._output
        if saved is not None and any(_stdout_redirected(r) for r in redirects):
            self._output = []
        fed_before, self._stdin_fed = self._stdin_fed, fed
        try:
            return self._statement(body)
        finally:
            self._stdin_fed = fed_before
            self._output = saved

    def _record_write(self, redirect) -> None:
        """Note the file a ``>``/``>>`` sends output to: reading it later (``source``, ``[ -f ]``)
        would read what the script wrote, which check does not know."""
        if redirect.type != "file_redirect":
            return
        target = self._check_redirect(redirect)
        written = text(redirect).strip()
        if not re.match(r"\d*(&>>?|>>?|>\|)", written) or target is None:
            return
        if target in ("/dev/null", "/dev/stdout", "/dev/stderr") or re.fullmatch(r"&?\d+-?", target):
            return
        if self.is_unknown(target) or self.is_unknown(self.cwd):
            self.written.add("")
        else:
            path = os.path.normpath(os.path.join(self.cwd, target))
            if not os.path.isdir(os.path.dirname(path)):
                self.note(redirect, f"writes into {os.path.dirname(path)}, assumed to exist when it runs (it does "
                                    "not on this machine; where it does not, bash does not run the command)")
            self.written.add(path)

    def _check_redirect(self, redirect) -> Optional[str]:
        """Refuse a redirection that fails in bash (its command does not run, status 1) or that
        the reader cannot follow: a target of no word or several (``"$@"``), an empty name, a
        descriptor above 2 (opened or duplicated), input from a file this machine does not have."""
        descriptor = next((c for c in redirect.children if c.type == "file_descriptor"), None)
        operator = next((c for c in redirect.children if not c.is_named), None)
        targets = [c for c in redirect.named_children if c.type != "file_descriptor"]
        if descriptor is not None and int(text(descriptor)) > 2:
            raise self.refuse(redirect, "check does not model file descriptors above 2")
        if operator is None or text(operator) in (">&-", "<&-"):
            return None
        fields = self._fields(targets)
        if len(fields) != 1 or fields[0] == "":
            raise self.refuse(redirect, "a redirection to no file, an empty name or several words (bash's error)")
        target = fields[0]
        if self.is_unknown(target):
            return target
        if text(operator) in (">&", "<&") and re.fullmatch(r"[0-9]+-?", target):
            if int(target.rstrip("-")) > 2:
                raise self.refuse(redirect, "check does not model file descriptors above 2")
            return target
        if text(operator) in ("<", "<>"):
            if self.is_unknown(self.cwd):
                raise self.refuse(redirect, "input from a file in a directory check does not know")
            path = os.path.normpath(os.path.join(self.cwd, target))
            readable = os.path.exists(path) and not os.path.isdir(path)
            if path not in self.written and "" not in self.written and not readable:
                raise self.refuse(redirect, f"input from {path}, which this machine does not have (bash's "
                                            "command would fail)")
        return target

    def _do_if_statement(self, node) -> Status:
        branches = _clauses(node.children)
        for child in node.children:
            if child.type == "elif_clause":
                branches += _clauses(child.children)
            elif child.type == "else_clause":
                branches.append((None, [c for c in child.children if c.is_named]))
        for index, (test, block) in enumerate(branches):
            if test is None:
                self._block(block)
                return self.status
            status = None
            for statement in test:
                status = self._ignoring_errexit(statement)
            if status is None:
                rest = [n for _, b in branches[index:] for n in b]
                rest += [n for t, _ in branches[index + 1:] for n in t or []]
                if all(_inert(n, self.state.functions) for n in rest):
                    self.emit(None)
                    return None
                raise self.refuse(test[0], "this test decides what the script runs, and its value is not known "
                                           "without running something")
            if status == 0:
                self._block(block)
                return self.status
        return 0

    def _do_case_statement(self, node) -> Status:
        value = self._one(node.child_by_field_name("value"))
        items = [child for child in node.named_children if child.type == "case_item"]
        if self.is_unknown(value):
            if all(_inert(item, self.state.functions) for item in items):
                self.emit(None)
                return None
            raise self.refuse(node.child_by_field_name("value"), "this case decides what the script runs, and its "
                                                                  "value is not known")
        status, falling = 0, False
        for item in items:
            if not falling and not self._case_matches(item, value):
                continue
            body = [child for i, child in enumerate(item.children)
                    if child.is_named and item.field_name_for_child(i) not in ("value", "termination")]
            self._block(body)
            status = self.status if body else 0
            termination = next((child.type for child in item.children if child.type in (";;", ";&", ";;&")), ";;")
            if termination == ";;":
                return status
            falling = termination == ";&"
        return status

    def _case_matches(self, item, value: str) -> bool:
        head = []
        for child in item.children:
            head.append(child)
            if child.type == ")":
                break
        for before, after in zip(head, head[1:], strict=False):
            gap = (_gap(before, after) or b"").strip(b" \t")
            values = before.type not in ("(", "|") and after.type not in (")", "|")
            if gap or values:
                raise self.refuse(after, "a case pattern tree-sitter-bash reads otherwise than bash (two words, an "
                                         "escaped blank)")
        for index, child in enumerate(item.children):
            if item.field_name_for_child(index) != "value":
                continue
            pieces = self._pieces(child, quoted=True, pattern=True)
            if any(self.is_unknown(piece.text) for piece in pieces if piece is not BREAK):
                if _inert(item, self.state.functions):
                    self.emit(None)
                    return False
                raise self.refuse(child, "this case pattern is not known")
            if words.Pattern(pieces).match(value):
                return True
        return False

    def _do_for_statement(self, node) -> Status:
        name = text(node.child_by_field_name("variable"))
        values = [child for i, child in enumerate(node.children) if node.field_name_for_child(i) == "value"]
        items = self._fields(values) if values else list(self.positional)
        body = node.child_by_field_name("body")
        if any(self.is_unknown(item) for item in items) and not _inert(body, self.state.functions):
            statements = [child for child in body.named_children if child.type != "comment"]
            if statements and all(child.type == "unset_command" for child in statements):
                self.note(node, "unsets variables named by output check does not have; the variables that decide "
                                "what verl loads are assumed not among them")
                return 0
            raise self.refuse(node, "the words of this loop are not known")
        status = 0
        self._loops += 1
        try:
            for item in items:
                self._set(name, item, node)
                try:
                    self._block(body.children)
                    status = self.status
                except LoopControl as control:
                    status = 0
                    if control.levels > 1:
                        raise LoopControl(control.kind, control.levels - 1) from None
                    if control.kind == "break":
                        break
        finally:
            self._loops -= 1
        return status

    def _do_while_statement(self, node) -> Status:
        """``while``/``until`` on tests it knows (an argument-parsing loop), at most ``LOOP_LIMIT`` times."""
        until = node.children[0].type == "until"
        body = next(child for child in node.named_children if child.type == "do_group")
        conditions = [child for child in node.named_children if child.type not in ("do_group", "comment")]
        status = 0
        for _ in range(LOOP_LIMIT):
            self._loops += 1  # a break in the test leaves this loop too
            try:
                test = None
                for condition in conditions:
                    test = self._ignoring_errexit(condition)
                if test is None:
                    if _inert(node, self.state.functions):
                        self.emit(None)
                        return 0
                    raise self.refuse(node, "this loop's test is not known without running something, and its "
                                            "body changes what the script runs")
                if (test == 0) == until:
                    return status
                self._block(body.children)
                status = self.status
            except LoopControl as control:
                status = 0
                if control.levels > 1:
                    raise LoopControl(control.kind, control.levels - 1) from None
                if control.kind == "break":
                    return 0
            finally:
                self._loops -= 1
        raise self.refuse(node, f"this loop does not end within {LOOP_LIMIT} rounds")

    def _do_c_style_for_statement(self, node) -> Status:
        raise self.refuse(node, "check does not evaluate C-style for loops")

    def _do_test_command(self, node) -> Status:
        expression = list(node.named_children)
        if not text(node).startswith("[["):
                return builtins.BUILTINS["["](self, ["[", *self._test_words(node.children[1:-1]), "]"], node)
        if not expression:
            return 2
        truth = self._conditional(expression[0])
        return None if truth is None else int(not truth)

    def _do_declaration_command(self, node) -> Status:
        keyword = node.children[0].type
        flags: set = set()
        in_function = bool(self.state.locals)
        if keyword == "local" and not in_function:
            return 1  # bash: "local: can only be used in a function"
        for child in node.named_children:
            if child.type == "word" and text(child).startswith(("-", "+")):
                written = text(child)
                allowed = {"export": "", "readonly": "a", "local": "a", "declare": "axgr", "typeset": "axgr"}[keyword]
                if written.startswith("+") or any(letter not in allowed for letter in written[1:]):
                    raise self.refuse(child, f"check does not model {keyword} {written}")
                flags.update(written[1:])
                continue
            local = keyword == "local" or (keyword in ("declare", "typeset") and in_function and "g" not in flags)
            if child.type == "variable_assignment":
                shadowed = self._outermost_local(text(child.child_by_field_name("name"))) if "g" in flags else None
                if shadowed is not None and flags & {"x", "r"}:
                    raise self.refuse(child, f"check does not model declare -{''.join(sorted(flags))} of a name a "
                                             "caller's local shadows")
                name = self._assign(child, local=local, array="a" in flags, global_="g" in flags)
            elif child.type == "variable_name":
                name = text(child)
                if local:
                    self._make_local(name, child)
                    self.variables.pop(name, None)
                elif "a" in flags and name not in self.variables:
                    self.variables[name] = []
            else:
                raise self.refuse(child, f"check does not read this {keyword} argument")
            if keyword == "export" or "x" in flags:
                if local:
                    raise self.refuse(child, "check does not model an exported local variable")
                self.state.exported.add(name)
                self.exported_at[name] = line(child)
            if keyword == "readonly" or "r" in flags:
                self.state.readonly.add(name)
        return 0

    def _do_unset_command(self, node) -> Status:
        mode = ""
        for child in node.named_children:
            name = self._one(child)
            if name in ("-v", "-f"):
                mode = name
                continue
            if self.is_unknown(name) or not re.fullmatch(r"[A-Za-z_]\w*", name):
                raise self.refuse(child, "check does not model unset of this name")
            if name in self.state.readonly or name in _SPECIAL_ASSIGNMENTS:
                raise self.refuse(child, f"unset of {name}")
            if mode != "-f" and any(name in names for names in self._temporary):
                raise self.refuse(child, f"unset of {name} while an `{name}=... command` binding holds it (bash "
                                         "then reveals the value beneath it, which check does not model)")
            if name in BASH_OWN and mode != "-f":
                self._unset_own.add(name)
            holding = [scope for scope in self.state.locals if name in scope]
            if mode != "-f" and holding and holding[-1] is not self.state.locals[-1]:
                # a caller's local: bash removes it, and the variable it shadowed is seen again
                revealed = holding[-1].pop(name)
                if revealed is None:
                    self.variables.pop(name, None)
                else:
                    self.variables[name] = revealed
            elif mode != "-f" and (name in self.variables or mode == "-v"):
                self.variables.pop(name, None)
                self.state.exported.discard(name)
            elif mode != "-v":
                self.state.functions.pop(name, None)
            self.exported_at[name] = line(child)
        return 0

    def _do_command(self, node) -> Status:
        children = [(child, node.field_name_for_child(index)) for index, child in enumerate(node.children)]
        groups, start = [], 0
        for index in range(1, len(children)):
            gap = node.text[children[index - 1][0].end_byte - node.start_byte:
                            children[index][0].start_byte - node.start_byte]
            if b"\n" in gap.replace(b"\\\n", b""):
                groups.append(children[start:index])
                start = index
        groups.append(children[start:])
        for group in groups[:-1]:  # tree-sitter-bash joins `A=1 B=2` with the next line's command
            if any(child.type != "variable_assignment" for child, _ in group):
                raise self.refuse(node, "tree-sitter-bash misreads this command across lines")
            self.status = self._errexit(node, self._assignments([child for child, _ in group]))
        return self._simple_command(node, groups[-1])

    def _simple_command(self, node, children: list) -> Status:
        assignments, arguments = [], []
        for (child, _), (following, _) in zip(children, children[1:], strict=False):
            gap = _gap(child, following) if child.type == "variable_assignment" else None
            parts = None if gap is None else _gap_parts(gap)
            if parts is not None and (parts[0] or not parts[1]):
                raise self.refuse(child, "tree-sitter-bash ends this assignment's word where bash goes on")
        for child, role in children:
            if child.type == "variable_assignment":
                assignments.append(child)
            elif role in ("name", "argument"):
                arguments.append(child)
            elif child.type in ("herestring_redirect", "heredoc_redirect"):
                self._stdin_fed = True
            elif child.type == "file_redirect":
                self._record_write(child)
        if len(arguments) > MAX_FIELDS:
            raise self.refuse(node, f"a command of over {MAX_FIELDS} words")
        saved, self._substitution_status = self._substitution_status, []
        try:
            fields = self._fields(arguments, arguments=True)
            if not fields:
                for child in assignments:
                    self._assign(child)
                found = self._substitution_status
                return found[-1] if found else 0
        finally:
            self._substitution_status = saved
        return self.run(fields, node, self._prefix(assignments))

    def _prefix(self, assignments: list) -> dict:
        """``A=1 B=$A cmd``: the assignments before a command, expanded left to right, each seeing
        the ones before it (bash's order; the words of the command were expanded before them)."""
        prefix: dict = {}
        saved = {}
        try:
            for child in assignments:
                name_node = child.child_by_field_name("name")
                name = text(name_node)
                if name_node.type != "variable_name" or name in _SPECIAL_ASSIGNMENTS or \
                        name in self.state.readonly or any(c.type == "+=" for c in child.children):
                    raise self.refuse(child, f"check does not model this assignment to {name}")
                value = child.child_by_field_name("value")
                _whole_value(self, child, value)
                prefix[name] = self._one(value, assignment=True) if value is not None else ""
                saved.setdefault(name, self.variables.get(name))
                self.variables[name] = prefix[name]
        finally:
            for name, old in saved.items():
                if old is None:
                    self.variables.pop(name, None)
                else:
                    self.variables[name] = old
        return prefix

    # --- commands -----------------------------------------------------------------------------

    def run(self, fields: list, node, prefix: Mapping[str, str] = ()) -> Status:
        """A command's fields: a function of the script, a builtin evaluated here, or ``on_command``."""
        if len(fields) > MAX_FIELDS:
            raise self.refuse(node, f"a command of over {MAX_FIELDS} words")
        name = fields[0]
        if self.is_unknown(name):
            return self._external(fields, node, prefix)
        if name in self.state.functions or name in builtins.BUILTINS:
            if not prefix:
                return self._internal(name, fields, node)
            return self._with_temporary(prefix, lambda: self._internal(name, fields, node))
        return self._external(fields, node, prefix)

    def _internal(self, name: str, fields: list, node) -> Status:
        if name in self.state.functions:
            return self._call(name, fields[1:], node)
        return builtins.BUILTINS[name](self, fields, node)

    def _external(self, fields: list, node, prefix: Mapping[str, str] = ()) -> Status:
        answer = self.on_command(self, Command(tuple(fields), line(node), self.environment(prefix), self._stdin_fed))
        self.emit(answer.output)
        return answer.status

    def _with_temporary(self, prefix: Mapping[str, str], run: Callable[[], Status]) -> Status:
        """``A=1 f``: the assignments hold, exported, for the function or builtin only."""
        saved = {name: (self.variables.get(name), name in self.state.exported) for name in prefix}
        for name, value in prefix.items():
            self._set(name, value, None)
            self.state.exported.add(name)
        self._temporary.append(set(prefix))
        try:
            return run()
        finally:
            self._temporary.pop()
            for name, (value, exported) in saved.items():
                if value is None:
                    self.variables.pop(name, None)
                else:
                    self.variables[name] = value
                if not exported:
                    self.state.exported.discard(name)

    def emit(self, output: Optional[str]) -> None:
        """Add to the output of the command substitution being read (``None``: not known)."""
        if self._output is not None:
            self._output.append(output)

    def _call(self, name: str, arguments: list, node) -> Status:
        if self._calls >= MAX_CALL_DEPTH:
            raise self.refuse(node, f"functions nest deeper than {MAX_CALL_DEPTH} calls")
        saved_positional, loops = self.state.positional, self._loops
        self.state.positional = list(arguments)
        self.state.locals.append({})
        self._calls += 1
        self._loops = 0
        body = self.state.functions[name]
        self.files.append(self._defined_in.get(body, self.invoked_as))
        try:
            return self._statement(body)
        except Return as stop:
            return stop.status
        finally:
            self.files.pop()
            self._calls -= 1
            self._loops = loops
            for local, old in self.state.locals.pop().items():
                if old is None:
                    self.variables.pop(local, None)
                else:
                    self.variables[local] = old
            self.state.positional = saved_positional

    def substitute(self, node) -> str:
        """The output of ``$(...)``/backticks as the reader knows it, else a marker; its status is
        recorded for an assignment's own status."""
        if text(node).startswith("$(("):
            raise self.refuse(node, "tree-sitter-bash reads this $((...)) as a command substitution")
        saved, self._output = self._output, []
        status_before = self.status

        def body() -> Status:
            self._block(node.children)
            return self.status

        try:
            status = self.in_subshell(body, errexit=False)
            collected = self._output
        finally:
            self._output = saved
            self.status = status_before
        if self._substitution_status is not None:
            self._substitution_status.append(status)
        if any(piece is None for piece in collected):
            return self.unknown(node)
        return self._bounded("".join(collected).rstrip("\n"), node)

    def _bounded(self, value: str, node) -> str:
        if len(value) > MAX_VALUE:
            raise self.refuse(node, f"a value of over {MAX_VALUE} characters")
        return value

    # --- words --------------------------------------------------------------------------------

    def _fields(self, nodes, arguments: bool = False) -> list:
        """The fields of several words, as bash splits them (markers for unknown parts).
        ``arguments``: a command's, where ``NAME=~/x`` gets tilde expansion as an assignment."""
        found: list = []
        ifs = self._ifs()
        for group in self._grouped(nodes):
            pieces, node = [], group[-1]
            for index, part in enumerate(group):
                if isinstance(part, Piece):
                    pieces.append(part)
                    continue
                node = part
                if node.type in ("word", "concatenation") and words.may_brace_expand(text(node)):
                    raise self.refuse(node, "check does not model brace expansion ({a,b}, {1..3}); quote the word")
                assignment = "word" if arguments and index == 0 and re.match(r"[A-Za-z_]\w*=", text(node)) else False
                pieces += self._pieces(node, quoted=False, assignment=assignment, start=index == 0)
            fields = [words.as_bytes(field) for field in words.split(pieces, ifs)]
            if "noglob" not in self.state.options:
                self._check_glob(pieces, node)
            found.extend(fields)
            if len(found) > MAX_FIELDS:
                raise self.refuse(node, f"over {MAX_FIELDS} words")
        return found

    def _grouped(self, nodes) -> list:
        """``nodes`` (a command's words) as bash's words: tree-sitter-bash ends a word at an escaped
        blank (``a\\ b``), a backslash-newline (``a\\<newline>b``) or an escaped character after a
        quote (``"a"\\~``), where bash goes on; each group is the nodes of one word, with the escaped
        blanks between them as literal pieces."""
        groups: list = []
        previous = None
        for node in nodes:
            if node.type == "comment":
                continue
            gap = _gap(previous, node) if previous is not None else None
            parts = None if gap is None else _gap_parts(gap)
            if gap is not None and parts is None and re.search(rb"\\[ \t]", gap):
                raise self.refuse(node, "check does not model an escaped blank here")
            if parts is not None and not parts[1] and b"\\\n" in gap and re.search(r"\$\w*$", text(previous)):
                raise self.refuse(node, "a backslash-newline after a $NAME (bash joins the name with what follows)")
            if parts is None:
                groups.append([node])
            else:
                suffix, separate, prefix = parts
                if not separate:
                    groups[-1] += [Piece(suffix + prefix, False, False)] * bool(suffix + prefix) + [node]
                else:
                    groups[-1] += [Piece(suffix, False, False)] * bool(suffix)
                    groups.append([Piece(prefix, False, False)] * bool(prefix) + [node])
            previous = node
        return groups

    def _check_glob(self, pieces: list, node) -> None:
        """bash replaces a word with glob characters outside quotes by the files it matches:
        refused when a file here matches, kept as written otherwise (bash does the same)."""
        active = "".join(piece.text for piece in pieces if piece is not BREAK and piece.active)
        if not re.search(r"[*?\[]", active):
            return
        if self.is_unknown(self.cwd):
            raise self.refuse(node, "a word with glob characters in a directory check does not know")
        whole = "".join(piece.text for piece in pieces if piece is not BREAK)
        if "/" in whole:
            import glob

            if glob.glob(whole, root_dir=self.cwd):
                raise self.refuse(node, "this word's glob characters match files here (bash would replace it)")
            return
        try:
            entries = os.listdir(self.cwd)[:10001]
        except OSError:
            return
        if len(entries) > 10000:
            raise self.refuse(node, "a word with glob characters in a directory of over 10000 files")
        pattern = words.Pattern(pieces)
        for entry in entries:
            if (whole.startswith(".") or not entry.startswith(".")) and entry.isascii() and pattern.match(entry):
                raise self.refuse(node, f"this word's glob characters match {entry!r} here (bash would replace it)")

    def _ifs(self) -> str:
        value = self.variables.get("IFS", words.DEFAULT_IFS)
        return scalar(value)

    def _one(self, node, pattern: bool = False, assignment: bool = False) -> str:
        """A word without splitting (assignment values, case subjects, [[ ]] operands)."""
        if node is None:
            return ""
        pieces = self._pieces(node, quoted=True, pattern=pattern, assignment=assignment)
        return words.as_bytes("".join(" " if piece is BREAK else piece.text for piece in pieces))

    def _pieces(self, node, quoted: bool, pattern: bool = False, assignment: bool = False,
                start: bool = True) -> list:
        """The pieces of one word (``BREAK`` between the fields of ``"$@"``); ``quoted``: no word
        splitting (inside [[ ]], assignments, case); ``pattern``: backslashes kept for the pattern."""
        kind = node.type
        if kind == "regex" and re.search(r"[$`'\"]", text(node)):
            return self._pieces(self._as_word(node), quoted, pattern, assignment, start)
        if kind in ("word", "number", "extglob_pattern", "regex", "special_variable_name", "variable_name"):
            written = text(node)
            if pattern:
                return [Piece(self._tilde(written, node, False) if start else written, False, True)]
            if assignment == "word" and start:
                name = re.match(r"[A-Za-z_]\w*=", written)
                written = name.group(0) + self._tilde(written[name.end():], node, True, True) if name else written
            elif start or assignment:
                written = self._tilde(written, node, bool(assignment), start)
            return [Piece(words.unescape_unquoted(written), False, True)]
        if kind == "raw_string":
            return [Piece(text(node)[1:-1], False, False)]
        if kind == "ansi_c_string":
            return [Piece(words.ansi_c(text(node)[2:-1]), False, False)]
        if kind in ("string", "translated_string"):
            return self._string(node)
        if kind == "command_name":
            return self._pieces(node.named_children[0], quoted, pattern, assignment, start)
        if kind == "concatenation":
            found = []
            first = text(node.children[0])
            if start and first.startswith("~") and not re.search("[/:]" if assignment else "/", first):
                start = False  # the tilde-prefix runs into the next part (~$X, ~"/x"): bash keeps it as written
            for index, child in enumerate(node.children):
                if index:
                    found.extend(self._joined_gap(node.children[index - 1], child))
                found.extend(self._pieces(child, quoted, pattern, assignment, start and index == 0))
            return found
        if kind in ("simple_expansion", "expansion", "command_substitution", "arithmetic_expansion"):
            found = self._expanded(node, quoted)
            if pattern:  # an unquoted expansion in a pattern or regex is itself pattern text
                return [piece if piece is BREAK else Piece(piece.text, piece.split, True) for piece in found]
            return found
        raise self.refuse(node, f"check does not evaluate bash's {kind.replace('_', ' ')}")

    def _joined_gap(self, before, after) -> list:
        """What tree-sitter-bash leaves out between two parts of one word: escaped blanks (literal
        pieces) and backslash-newlines (nothing); anything else is refused."""
        gap = _gap(before, after)
        if not gap:
            return []
        parts = _gap_parts(gap)
        if parts is None or parts[1]:
            raise self.refuse(after, "tree-sitter-bash leaves part of this word out")
        return [Piece(parts[0] + parts[2], False, False)] * bool(parts[0] + parts[2])

    def _as_word(self, node):
        """A pattern tree-sitter-bash leaves as raw text (``${X#$P}``), parsed again as one word."""
        root = parse.parse_script(b": " + node.text, str(self.script))
        command = root.named_children[0] if len(root.named_children) == 1 else None
        arguments = [] if command is None else command.children_by_field_name("argument")
        if len(arguments) != 1 or text(arguments[0]) != text(node):
            raise self.refuse(node, "check cannot read this pattern as one word")
        return arguments[0]

    def _expanded(self, node, quoted: bool) -> list:
        kind = node.type
        if kind == "simple_expansion":
            name = node.named_children[-1]
            if name.type == "variable_name" and re.match(r"[@*#?$!-]", text(name)):
                raise self.refuse(node, "tree-sitter-bash misreads a special parameter followed by a word")
            if b"\\\n" in name.text:
                raise self.refuse(node, "a backslash-newline after $ (bash joins the lines into the name)")
            if name.type == "variable_name" and text(name)[0].isdigit() and len(text(name)) > 1:
                digit = text(name)[0]  # $10 is ${1}0, $2z is ${2}z
                first = self._lookup_parameter(digit)
                return [Piece(first + text(name)[1:], not quoted, not quoted)]
            return self._value_pieces(self._lookup(name, strict=True), quoted, node)
        if kind == "expansion":
            return self._expansion(node, quoted)
        if kind == "command_substitution":
            return [Piece(self.substitute(node), not quoted, not quoted)]
        return [Piece(self._arithmetic_text(node), not quoted, not quoted)]

    def _lookup_parameter(self, number: str, strict: bool = True) -> str:
        """``$0``, ``$1``...: the script as invoked, or a positional parameter (unset: ``set -u`` applies)."""
        if number == "0":
            return self.invoked_as
        index = int(number)
        return self.positional[index - 1] if index <= len(self.positional) else self._unset(number, strict)

    def _tilde(self, written: str, node, assignment: bool, start: bool = True) -> str:
        """Tilde expansion: ``~`` and ``~/...`` at the word's start (and after ``:`` in an
        assignment) are $HOME; ``~user``, ``~+``, ``~-`` are refused."""
        def home(match) -> str:
            if match.group(1):
                return self._user_home(match.group(1), node)
            value = self.variables.get("HOME")
            if value is None:
                raise self.refuse(node, "~ with HOME unset")
            return scalar(value)

        prefix = r"(?:^|(?<=:))" if assignment else r"^"
        if not start:
            if not assignment:
                return written
            prefix = r"(?<=:)"
        return re.sub(prefix + r"~([^/:]*)(?=/|:|$)", home, written)  # bash ends a tilde-prefix at : too

    def _user_home(self, name: str, node) -> str:
        """``~name``: that user's home on this machine (said so); unchanged when there is no such
        user, as bash leaves it (Hydra's ``~key`` removals among them)."""
        if name in ("+", "-") or name.startswith(("+", "-")):
            raise self.refuse(node, f"check does not model ~{name}")
        import pwd

        try:
            found = pwd.getpwnam(name).pw_dir
        except (KeyError, ValueError):
            self.note(node, f"keeps ~{name} as written: this machine has no user {name} (nor, it is assumed, "
                            "the run's)")
            return f"~{name}"
        self.note(node, f"is {found}, user {name}'s home on this machine (assumed the run's too)")
        return found

    def _string(self, node) -> list:
        data = node.text
        pieces: list = [Piece("", False, False)]
        position = node.start_byte + (2 if data.startswith(b'$"') else 1)
        empty_list, literal = False, False  # "${A[@]}" of no element; text of the string's own
        for child in node.children:
            if not child.is_named:
                continue
            # tree-sitter-bash starts an expansion's node at the blanks before its ``$`` (they have
            # no node of their own): they are the string's text, read from the bytes
            begins = child.start_byte + _leading_blanks(child)
            literal = literal or begins > position or child.type == "string_content"
            if begins > position:
                gap = data[position - node.start_byte:begins - node.start_byte].decode(errors="surrogateescape")
                pieces.append(Piece(words.unescape_double(gap), False, False))
            if child.type == "string_content":
                pieces.append(Piece(words.unescape_double(text(child)), False, False))
            else:
                found = self._pieces(child, quoted=True)
                empty_list = empty_list or (not found and re.search(r"\$\{?@|\[@\]", text(child)) is not None)
                pieces.extend(found)
            position = child.end_byte
        if node.end_byte - 1 > position:
            gap = data[position - node.start_byte:node.end_byte - 1 - node.start_byte].decode(errors="surrogateescape")
            pieces.append(Piece(words.unescape_double(gap), False, False))
        pieces = [Piece(p.text, False, False) if p is not BREAK else p for p in pieces]
        if empty_list and not literal and not any(p is BREAK or p.text for p in pieces):
            return []  # bash: "${A[@]}${E}" with no element and E empty is no word at all
        if len(pieces) == 2 and pieces[1] is BREAK or _only_all(node):
            pieces = pieces[1:]
        return pieces

    def _value_pieces(self, value, quoted: bool, node) -> list:
        if isinstance(value, _All):
            if quoted and value.joined:
                ifs = self.variables.get("IFS", words.DEFAULT_IFS)
                return [Piece(scalar(ifs)[:1].join(value.items), False, False)]
            pieces: list = []
            for index, item in enumerate(value.items):
                if index:
                    pieces.append(BREAK)
                pieces.append(Piece(item, not quoted, not quoted))
            return pieces
        return [Piece(value, not quoted, not quoted)]

    def _lookup(self, name_node, strict: bool = False):
        """A parameter's value (``_All`` for ``$@``, ``$*``, ``${a[@]}``). ``strict``: under
        ``set -u`` an unset one ends the shell with status 1, as bash's does."""
        name = text(name_node)
        if name_node.type == "subscript":
            return self._subscript(name_node, strict)
        if name in ("@", "*"):
            return _All(list(self.positional), joined=name == "*")
        if name == "#":
            return str(len(self.positional))
        if name == "?":
            return self.unknown(name_node, "$?") if self.status is None else str(self.status)
        if name.isdigit():
            return self._lookup_parameter(name, strict)
        if name in self.variables:
            return scalar(self.variables[name])
        if name == "LINENO":
            return self._lineno(name_node)
        if name == "PWD":
            return self.cwd
        if name == "IFS":
            return words.DEFAULT_IFS
        if name == "BASH_SOURCE":
            return self.files[-1]
        if name in BASH_OWN or name in ("$", "!", "-"):
            return self.unknown(name_node, f"${name}")
        return self._unset(name, strict)

    def _lineno(self, node) -> str:
        """``$LINENO``: the line it is on, where its command starts on that line too (bash counts a
        command's lines in ways check does not model)."""
        statement = node
        while statement.parent is not None and not statement.type.endswith(("command", "statement", "assignment")):
            statement = statement.parent
        if b"\n" in statement.text[:node.start_byte - statement.start_byte]:
            raise self.refuse(node, "$LINENO in a command that starts on an earlier line")
        return str(line(node))

    def _unset(self, name: str, strict: bool) -> str:
        if strict and "nounset" in self.state.options:
            self.note(None, f"ends the script: {name} is unset under set -u (bash exits with status 1)")
            raise Exit(1)
        return ""

    def _is_set(self, target) -> bool:
        name = text(target)
        if target.type == "subscript":
            base = text(target.child_by_field_name("name"))
            value = self.variables.get(base)
            index = text(target.child_by_field_name("index"))
            if index in ("@", "*"):
                return bool(value)
            position = self._arithmetic(target, *self._inside(target, "["))
            items = value if isinstance(value, list) else ([] if value is None else [value])
            return position is not None and -len(items) <= position < len(items)
        if name in ("@", "*", "#", "?", "0"):
            return True
        return self.name_set(name, target)

    def name_set(self, name: str, node) -> bool:
        """Whether the variable ``name`` is set (``[[ -v name ]]``, ``${name+x}``): a positional
        parameter by number; an array by its element 0; bash's own variables as bash 5.2 sets them
        running a script file (``ALWAYS_SET``, ``NEVER_SET``, ``FUNCNAME`` in a function), the
        others refused."""
        if name.isdigit():
            return name == "0" or 0 < int(name) <= len(self.positional)
        if name in self.variables:
            value = self.variables[name]
            return bool(value) if isinstance(value, list) else True
        if name in BASH_OWN:
            if name in self._unset_own:
                raise self.refuse(node, f"whether bash's {name} is set after the script's unset of it")
            if name == "FUNCNAME":
                return bool(self.state.locals)
            if name in ALWAYS_SET or name in NEVER_SET:
                return name in ALWAYS_SET
            raise self.refuse(node, f"whether bash's {name} is set depends on how bash was started")
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise self.refuse(node, f"check does not model this test of {name!r}")
        return False

    def _subscript(self, node, strict: bool = False):
        name = text(node.child_by_field_name("name"))
        index_node = node.child_by_field_name("index")
        index = text(index_node)
        if name in BASH_OWN and name not in self.variables:
            if name == "BASH_SOURCE":
                value = list(reversed(self.files))
            elif index in ("@", "*"):
                raise self.refuse(node, f"check does not model bash's {name}")
            else:
                return self.unknown(node, f"${{{text(node)}}}")
        else:
            value = self.variables.get(name)
        items = value if isinstance(value, list) else ([] if value is None else [value])
        if index in ("@", "*"):
            return _All(list(items), joined=index == "*")
        position = self._arithmetic(node, *self._inside(node, "["))
        if position is None:
            return self.unknown(node)
        if -len(items) <= position < len(items):
            return items[position]
        return self._unset(text(node), strict)

    def _expansion(self, node, quoted: bool) -> list:
        if re.search(rb"(?<!\\)(?:\\\\)*\\}$", node.text):
            raise self.refuse(node, "tree-sitter-bash ends this expansion at an escaped }")
        children = [child for child in node.children if child.type not in ("${", "}")]
        length = bool(children) and children[0].type == "#" and len(children) > 1
        if length:
            children = children[1:]
        if not children or children[0].type not in ("variable_name", "special_variable_name", "subscript"):
            raise self.refuse(node, "check does not evaluate this parameter expansion")
        target, rest = children[0], children[1:]
        operator = rest[0].type if rest else ""
        defaulting = operator in (":-", "-", ":=", "=", ":+", "+", ":?", "?")
        value = self._lookup(target, strict=not defaulting)
        name = text(target)
        if length:
            if rest:
                raise self.refuse(node, "check does not evaluate this parameter expansion")
            self._length_unset(target, node)
            if isinstance(value, _All):
                return [Piece(str(len(value.items)), not quoted, not quoted)]
            if self.is_unknown(value):
                return [Piece(self.unknown(node), not quoted, not quoted)]
            return [Piece(str(len(value)), not quoted, not quoted)]
        if not rest:
            return self._value_pieces(value, quoted, node)
        operands = rest[1:]
        written = node.text[rest[0].end_byte - node.start_byte:-1].decode(errors="surrogateescape")
        if defaulting:
            return self._defaulting(node, target, name, value, operator, written, quoted)
        if isinstance(value, _All):
            if operator == ":":
                return self._value_pieces(self._slice_all(node, name, value), quoted, node)
            raise self.refuse(node, "check does not evaluate this expansion of a list")
        if self.is_unknown(value):
            return [Piece(self.unknown(node), not quoted, not quoted)]
        if operator in ("/", "//", "/#", "/%") and not self._is_set(target):
            return [Piece("", not quoted, not quoted)]  # bash substitutes nothing in an unset value
        return [Piece(self._transformed(node, value, operator, operands, written), not quoted, not quoted)]

    def _length_unset(self, target, node) -> None:
        """``${#X[@]}`` under ``set -u`` where X holds no array elements (unset, declared only, or a
        scalar): bash 5.2 calls X unbound and abandons the command (status 1; under ``set -e`` the
        shell exits); what it abandons otherwise is not modeled."""
        if "nounset" not in self.state.options or target.type != "subscript" or \
                text(target.child_by_field_name("index")) not in ("@", "*"):
            return
        name = text(target.child_by_field_name("name"))
        value = self.variables.get(name)
        if isinstance(value, list) and value or name in BASH_OWN and name not in self.variables:
            return
        if value == []:
            raise self.refuse(node, f"whether bash 5.2 calls {name} unbound under set -u (X=() no, declare -a X yes)")
        if "errexit" in self.state.options and not self._ignore_errexit:
            self.note(node, f"ends the script: {name} is unbound under set -u (bash 5.2 exits with status 1)")
            raise Exit(1)
        raise self.refuse(node, f"{name} is unbound under set -u, and check does not model what bash then abandons")

    def _defaulting(self, node, target, name: str, value, operator: str, written: str, quoted: bool) -> list:
        """``${V:-w}``, ``${V-w}``, ``${V:=w}``, ``${V=w}``, ``${V:+w}``, ``${V+w}``, ``${V:?w}``,
        ``${V?w}``: the word is expanded only when it is used, as bash does. A list (``$@``, ``$*``,
        ``${a[@]}``) is set when it has an element, null when its elements joined are empty (``$*``'s
        way inside double quotes). Outside double quotes the word's unquoted parts are split (and
        ``~`` at its start expanded); inside them it is read as a double-quoted string."""
        if isinstance(value, _All):
            separator = scalar(self.variables.get("IFS", " "))[:1] if value.joined and _in_string(node) else " "
            present = bool(separator.join(value.items) if operator.startswith(":") else value.items)
            if operator.startswith(":") and value.items and not any(value.items) and quoted and not _in_string(node):
                raise self.refuse(node, "check does not model this test of empty elements outside quotes (bash "
                                        "reads it one way in arguments and [[ ]], another in assignments and case)")
        else:
            if self.is_unknown(value) and operator.startswith(":"):
                raise self.refuse(node, "whether this value is empty is not known")
            present = self._is_set(target) and not (operator.startswith(":") and value == "")

        def word() -> list:  # an empty word inside double quotes is still a (null) string
            found = self._operand_pieces(node, written, split=not quoted)
            return found or ([Piece("", False, False)] if quoted else [])

        if operator.endswith("+"):
            return word() if present else []
        if present:
            return self._value_pieces(value, quoted, node)
        if operator.endswith("?"):
            self.note(node, f"ends the script: {name} is unset or empty (bash exits with status 1)")
            raise Exit(1)
        found = word()
        if operator.endswith("="):
            if target.type != "variable_name":
                raise self.refuse(node, "check does not model this assignment")
            joined = "".join(p.text for p in found)
            self._check_assignable(name, node)
            self._set(name, joined, node)
            return [Piece(joined, not quoted, not quoted)]
        return found

    def _operand_pieces(self, node, written: str, split: bool, pattern: bool = False, tilde: bool = True) -> list:
        """The pieces of an operator's word (``${V:-word}``, a pattern, a replacement) from its text,
        parsed again as one word (tree-sitter-bash's tree of these words is not bash's): its
        unquoted literal characters ``split`` (and active), quoted or escaped ones literal, ``~``
        expanded at its start where ``tilde`` (and after ``:`` in an assignment's word, not a
        pattern's: bash's way). Inside double quotes a default
        word is a double-quoted string whose backslash also quotes ``}`` (its single quotes and
        ``~`` literal). ``$@``, ``$*``, ``[@]``, and ``"`` or ``$'...'`` inside a double-quoted
        word are refused."""
        if not written:
            return []
        if re.search(r"\$[@*]|\$\{[#!]?[@*]|\[[@*]\]", written):
            raise self.refuse(node, "check does not model $@, $* or [@] inside the word of a parameter expansion")
        if "\n" in written or "`" in written:
            raise self.refuse(node, "check does not model a newline or a backquote inside a parameter expansion")
        if _in_string(node) and not pattern:
            if re.search(r'(?<!\\)(\\\\)*"', written) or "$'" in written:
                raise self.refuse(node, "check does not model quotes inside the word of a double-quoted expansion")
            if re.search(r"(?<!\\)(\\\\)*\\\}", written):
                if re.search(r"\$[{(]", written):
                    raise self.refuse(node, "check does not model \\} beside an expansion in this word")
                written = re.sub(r"\\(.)", lambda m: m.group(1) if m.group(1) == "}" else m.group(0), written)
            string = self._reparsed_word(node, f'"{written}"', "string")
            return [Piece(p.text, False, False) for p in self._string(string) if p is not BREAK]
        marked = _mark_blanks(written)
        if marked is None:
            raise self.refuse(node, "check cannot read the word of this parameter expansion")
        found = []
        argument = self._reparsed_word(node, marked, None)
        parts = argument.children if argument.type == "concatenation" else [argument]
        assignment = _in_assignment(node) and not pattern
        for index, part in enumerate(parts):
            if part.type == "word":
                found.extend(_literal_pieces(text(part), split, self._home(node) if tilde else None,
                                             (index == 0, index == len(parts) - 1), assignment))
            else:
                found.extend(p for p in self._pieces(part, quoted=not split, pattern=pattern, start=False)
                             if p is not BREAK)
        return [Piece(p.text, False, p.active) for p in found] if pattern else found

    def _home(self, node) -> Callable[[str], str]:
        """A tilde-prefix (``~``, ``~user``) expanded as ``_tilde`` expands it."""
        return lambda prefix: self._tilde(prefix, node, False)

    def _reparsed_word(self, node, written: str, kind: Optional[str]):
        """``written`` parsed as the one argument of a command; refused when it is not one word."""
        try:
            root = parse.parse_script(b": " + written.encode(errors="surrogateescape"), str(self.script))
        except ReadError:
            root = None
        command = root.named_children[0] if root is not None and len(root.named_children) == 1 else None
        arguments = [] if command is None or command.type != "command" else command.children_by_field_name(
            "argument")
        if len(arguments) != 1 or text(arguments[0]) != written or (kind and arguments[0].type != kind) or \
                _misparsed(arguments[0]):
            raise self.refuse(node, "check cannot read the word of this parameter expansion as one word")
        return arguments[0]


    def _slice_all(self, node, name: str, value: _All) -> _All:
        numbers = self._bounds(node)
        if any(n is None for n in numbers):
            raise self.refuse(node, "the bounds of this slice are not known")
        items = [self.invoked_as] + value.items if name in ("@", "*") else value.items
        start = numbers[0] if numbers[0] >= 0 else len(items) + numbers[0]
        if start < 0:
            return _All([], value.joined)
        items = items[start:]
        if len(numbers) > 1:
            if numbers[1] < 0:
                raise self.refuse(node, "a negative length in a slice of a list (bash's error)")
            items = items[:numbers[1]]
        return _All(items, value.joined)

    def _transformed(self, node, value: str, operator: str, operands, written: str) -> str:
        if operator in ("/", "//", "/#", "/%"):
            pattern_text, slash, replacement_text = _split_replacement(written, operator)
            if pattern_text is None:
                raise self.refuse(node, "check cannot find where this pattern ends")
            pattern = self._operand_pieces(node, pattern_text, split=False, pattern=True,
                                           tilde=operator in ("/", "//"))  # bash: not after /# or /%
            if replacement_text.startswith("~"):
                raise self.refuse(node, "check does not model ~ in a replacement")
            replacement = self._operand_pieces(node, replacement_text, split=False, pattern=True, tilde=False)
            self._known(pattern + replacement, node)
            return self._bounded(words.replace(value, words.Pattern(pattern), _replacer(replacement, node, self),
                                               operator), node)
        if operator in ("#", "##", "%", "%%"):
            pattern = self._operand_pieces(node, written, split=False, pattern=True)
            self._known(pattern, node)
            return words.trim(value, words.Pattern(pattern), operator)
        if operator in (",,", ",", "^^", "^"):
            if operands or not value.isascii():
                raise self.refuse(node, "check does not model case changes of non-ASCII text or by a pattern")
            return {",,": value.lower(), "^^": value.upper(), ",": value[:1].lower() + value[1:],
                    "^": value[:1].upper() + value[1:]}[operator]
        if operator == ":":
            numbers = self._bounds(node)
            if any(n is None for n in numbers):
                raise self.refuse(node, "the bounds of this substring are not known")
            start = numbers[0] if numbers[0] >= 0 else max(len(value) + numbers[0], -1)
            if start < 0 or start > len(value):
                return ""
            if len(numbers) == 1:
                return value[start:]
            end = start + numbers[1] if numbers[1] >= 0 else len(value) + numbers[1]
            if end < start:
                raise self.refuse(node, "a substring length that ends before its start (bash's error)")
            return value[start:end]
        raise self.refuse(node, "check does not evaluate this parameter expansion")

    def _known(self, pieces: list, node) -> None:
        if any(piece is not BREAK and self.is_unknown(piece.text) for piece in pieces):
            raise self.refuse(node, "a pattern or replacement that is not known")

    # --- arithmetic and tests -----------------------------------------------------------------

    def _arithmetic_text(self, node) -> str:
        value = self._arithmetic(node, *self._inside(node))
        return self.unknown(node) if value is None else str(value)

    def _inside(self, node, opening: str = "") -> tuple:
        """The span between ``node``'s delimiters (``$((``/``))``, ``$[``/``]``, ``((``/``))``, or
        ``opening``/``]`` of a subscript) and the nodes in it, for ``_arithmetic``."""
        children = node.children
        first = next((i for i, child in enumerate(children) if child.type == opening), 0) if opening else 0
        if _CLOSING.get(children[first].type) != children[-1].type:
            raise self.refuse(node, "tree-sitter-bash ends this arithmetic where bash does not")
        return children[first].end_byte, children[-1].start_byte, children[first + 1:-1]

    def _bounds(self, node) -> list:
        """``${V:o}``/``${V:o:n}``: the offset and length, each the arithmetic between its colons
        (an empty one 0, as in bash); ``${V:}`` is bash's error."""
        children = node.children
        colons = [i for i, child in enumerate(children) if child.type == ":"]
        if children[-1].type != "}" or not 1 <= len(colons) <= 2:
            raise self.refuse(node, "tree-sitter-bash divides this substring's bounds where bash may not")
        if len(colons) == 1 and colons[0] == len(children) - 2 and children[-2].end_byte == children[-1].start_byte:
            raise self.refuse(node, "an empty offset (bash's error: bad substitution)")
        ends = colons[1:] + [len(children) - 1]
        return [self._arithmetic(node, children[a].end_byte, children[b].start_byte, children[a + 1:b])
                for a, b in zip(colons, ends, strict=True)]

    def _arithmetic(self, owner, start: int, end: int, inside) -> Optional[int]:
        """The arithmetic written in ``owner`` from byte ``start`` to ``end`` (``inside``: the nodes
        there), as bash evaluates it: its expansions expanded first (as in double quotes), then the
        text parsed and evaluated by bash's grammar (``arithmetic.evaluate``); a name's value is read
        only where bash reads it. ``None``: it holds an unknown value."""
        written, position, known = [], start, True
        for expansion in _expansions(inside):
            written.append(self._literal(owner, position, expansion.start_byte))
            value = self._one(expansion)
            known = known and not self.is_unknown(value)
            written.append(value)
            position = expansion.end_byte
        written.append(self._literal(owner, position, end))
        if not known:
            return None

        def value_of(name: str) -> Optional[str]:
            if name not in self.variables and name not in BASH_OWN:
                return self._unset(name, strict=True)
            value = self._lookup_name(name, owner)
            return None if self.is_unknown(value) else value

        return arithmetic.evaluate("".join(written), value_of)

    def _literal(self, owner, start: int, end: int) -> str:
        written = owner.text[start - owner.start_byte:end - owner.start_byte].decode(errors="surrogateescape")
        if re.search(r"[\\'\"`$]", written):
            raise self.refuse(owner, "check does not model quotes, backslashes or $ written this way in arithmetic")
        return written

    def _lookup_name(self, name: str, node) -> str:
        if name in self.variables:
            return scalar(self.variables[name])
        if name == "LINENO":
            return self._lineno(node)
        return self.unknown(node, f"${name}")

    def _conditional(self, node) -> Optional[bool]:
        """A ``[[ ]]`` expression: pattern matching, ``=~``, string and arithmetic comparisons."""
        kind = node.type
        if kind == "parenthesized_expression":
            return self._conditional(node.named_children[0])
        if kind == "unary_expression":
            operator = text(node.children[0])
            operand = node.named_children[-1]
            if operator == "!":
                inner = self._conditional(operand)
                return None if inner is None else not inner
            return self.unary(operator, self._one(operand), node)
        if kind == "binary_expression":
            operator = text(node.child_by_field_name("operator"))
            left_node, right_node = node.child_by_field_name("left"), node.child_by_field_name("right")
            if operator in ("&&", "||"):
                left = self._conditional(left_node)
                if left is not None and left == (operator == "||"):
                    return left
                right = self._conditional(right_node)
                return None if left is None or right is None else right
            left = self._one(left_node)
            if operator == "=~":
                pieces = self._regex_pieces(right_node)
                if self.is_unknown(left) or any(self.is_unknown(p.text) for p in pieces):
                    return None
                return words.regex_match(words.regex(pieces), left)
            if operator in ("=", "==", "!="):  # the fields of "${a[@]}" or $@ joined by a space, as bash does
                pieces = [Piece(" ", False, False) if piece is BREAK else piece
                          for piece in self._pieces(right_node, quoted=True, pattern=True)]
                if self.is_unknown(left) or any(p is not BREAK and self.is_unknown(p.text) for p in pieces):
                    return None
                return words.Pattern(pieces).match(left) != (operator == "!=")
            if operator in builtins.NUMERIC:
                a = self._arithmetic(left_node, left_node.start_byte, left_node.end_byte, [left_node])
                b = self._arithmetic(right_node, right_node.start_byte, right_node.end_byte, [right_node])
                return None if a is None or b is None else builtins.NUMERIC[operator](a, b)
            raise self.refuse(node, f"check does not model the test {operator}")
        if kind in ("word", "string", "raw_string", "simple_expansion", "expansion", "concatenation",
                    "command_substitution", "number"):
            value = self._one(node)
            return None if self.is_unknown(value) else bool(value)
        raise self.refuse(node, f"check does not evaluate this test ({kind.replace('_', ' ')})")

    def _test_words(self, nodes) -> list:
        """The arguments ``[`` gets, in order: the words expanded (and split, as bash does), the
        operators as written."""
        found: list = []
        for node in nodes:
            if node.type in _WORDS:
                found.extend(self._fields([node]))
            elif node.is_named and node.child_count:
                found.extend(self._test_words(node.children))
            elif node.type != "comment":
                found.append(text(node))
        return found

    def _regex_pieces(self, node) -> list:
        """The right side of ``=~``: quoted parts are literal; an unquoted expansion is a regex."""
        if node.type != "regex":
            return self._pieces(node, quoted=True, pattern=True)
        written, pieces, index = text(node), [], 0
        while index < len(written):
            character = written[index]
            if character in "'\"":
                end = written.find(character, index + 1)
                if end < 0:
                    raise self.refuse(node, "an unclosed quote in a regular expression")
                inner = written[index + 1:end]
                if character == '"' and re.search(r"[$`]", inner):
                    raise self.refuse(node, "an expansion inside quotes in a regular expression")
                pieces.append(Piece(inner if character == "'" else words.unescape_double(inner), False, False))
                index = end + 1
            elif character == "$" and re.match(r"[A-Za-z_{(]", written[index + 1:index + 2]):
                raise self.refuse(node, "an expansion inside a regular expression (put the whole regex in a variable)")
            elif character == "\\" and index + 1 < len(written):
                pieces.append(Piece(written[index:index + 2], False, True))
                index += 2
            else:
                pieces.append(Piece(character, False, True))
                index += 1
        return pieces

    def unary(self, operator: str, operand: str, node) -> Optional[bool]:
        """``-z``, ``-n``, ``-v`` and the file tests (read on this machine, and said so)."""
        if self.is_unknown(operand):
            return None
        if operator == "-z":
            return operand == ""
        if operator == "-n":
            return operand != ""
        if operator == "-v":
            return self._is_variable_set(operand, node)
        if operator in builtins.FILE_TESTS:
            if self.is_unknown(self.cwd):
                return None
            path = os.path.normpath(os.path.join(self.cwd, operand))
            if path in self.written or "" in self.written:
                raise self.refuse(node, "a test of a file the script may have written")
            found = builtins.FILE_TESTS[operator](path)
            self.note(node, f"is {str(found).lower()} on this machine (read, as the run's machine is assumed "
                            "to have the same files)")
            return found
        raise self.refuse(node, f"check does not model the test {operator}")

    def _is_variable_set(self, operand: str, node) -> bool:
        """``-v NAME`` (``name_set``) and ``-v NAME[N]`` (N an integer; a negative one counts from
        the end); another subscript (arithmetic) or an element of bash's own arrays is refused."""
        element = re.fullmatch(r"([A-Za-z_]\w*)\[\s*(-?[0-9]+)\s*\]", operand)
        if element is None:
            return self.name_set(operand, node)
        name, index = element.group(1), int(element.group(2))
        if name in BASH_OWN and name not in self.variables:
            raise self.refuse(node, f"check does not model -v {operand}")
        value = self.variables.get(name)
        items = value if isinstance(value, list) else ([] if value is None else [value])
        if index < 0 and index + len(items) < 0:
            raise self.refuse(node, f"-v {operand}: a subscript before the first element (bash's error)")
        return index < len(items) if index >= 0 else True

    # --- variables ----------------------------------------------------------------------------

    def _check_assignable(self, name: str, node) -> None:
        if name in self.state.readonly:
            raise self.refuse(node, f"an assignment to the readonly {name} (bash's error)")
        if name in _SPECIAL_ASSIGNMENTS:
            raise self.refuse(node, f"check does not model assigning bash's {name}")

    def _assign(self, node, local: bool = False, array: bool = False, global_: bool = False) -> str:
        """``NAME=VALUE``, ``NAME+=VALUE``, ``NAME=(...)``; ``global_``: ``declare -g``, which sets the
        global even where a caller's ``local`` shadows it (that local keeps its value)."""
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        _whole_value(self, node, value_node)
        if name_node.type == "subscript":
            raise self.refuse(node, "check does not evaluate assignments to array elements")
        name = text(name_node)
        self._check_assignable(name, node)
        scope = self._outermost_local(name) if global_ else None
        if local:
            self._make_local(name, node)
        append = any(child.type == "+=" for child in node.children)
        old = self.variables.get(name) if scope is None else scope[name]
        if value_node is not None and value_node.type == "array":
            if any(re.match(r"\[[^]]*\]=", text(child)) for child in value_node.named_children):
                raise self.refuse(node, "check does not model arrays with explicit indices")
            value = self._fields(value_node.named_children)
            if append and old is not None:
                value = (old if isinstance(old, list) else [old]) + value
        else:
            value = self._one(value_node, assignment=True)
            if append and isinstance(old, list):  # A+=x on an array appends to its element 0
                value = [(old[0] if old else "") + value] + old[1:]
            elif append and old is not None:
                value = old + value
            elif array:
                value = [value]
        if scope is None:
            self._set(name, value, node)
        else:
            if (sum(map(len, value)) if isinstance(value, list) else len(value)) > MAX_VALUE:
                raise self.refuse(node, f"a value of over {MAX_VALUE} characters")
            scope[name] = value
        return name

    def _outermost_local(self, name: str) -> Optional[dict]:
        """The scope of the outermost function call where ``name`` is local (it holds the global's
        value while the call lasts), or ``None``."""
        return next((scope for scope in self.state.locals if name in scope), None)

    def _set(self, name: str, value, node) -> None:
        self._hold(name, value, node)
        self.variables[name] = value
        if name in self.state.exported and node is not None:
            self.exported_at[name] = line(node)

    def _hold(self, name: str, value, node) -> None:
        size = sum(len(item) for item in value) if isinstance(value, list) else len(value)
        if size > MAX_VALUE:
            raise self.refuse(node, f"a value of over {MAX_VALUE} characters")
        old = self.variables.get(name)
        self.held += size - (0 if old is None else sum(map(len, old)) if isinstance(old, list) else len(old))
        if self.held > MAX_HELD:
            raise self.refuse(node, f"over {MAX_HELD} characters held in variables")

    def _make_local(self, name: str, node) -> None:
        if name in self.state.readonly:
            raise self.refuse(node, f"local of the readonly {name} (bash's error)")
        if self.state.locals and name not in self.state.locals[-1]:
            self.state.locals[-1][name] = self.variables.get(name)

    def _check_traps(self) -> None:
        for where, action in self.state.traps.values():
            root = parse.parse_script(action.encode(errors="surrogateescape"), "a trap's action")
            if not _inert(root, self.state.functions):
                raise ReadError(where, action[:80], "a trap runs this when the script ends or is signalled, and "
                                "check does not model traps that change what runs")


_CLOSING = {"$((": "))", "$[": "]", "((": "))", "[": "]"}
_EXPANDED = {"simple_expansion", "expansion", "command_substitution", "arithmetic_expansion", "string"}


def _expansions(nodes) -> list:
    """The outermost expansions (and double-quoted strings) among ``nodes`` and their descendants."""
    found = []
    for node in nodes:
        found.extend([node] if node.type in _EXPANDED else _expansions(node.children))
    return found


_ARITHMETIC_ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "^=", "|="}
_WORDS = {"word", "string", "raw_string", "ansi_c_string", "simple_expansion", "expansion", "concatenation",
          "command_substitution", "arithmetic_expansion", "number", "translated_string", "extglob_pattern", "regex"}
_OPERAND_SPECIAL = " \t;&|<>(){}#"
_OPERAND_MARKS = {character: chr(0xE000 + index) for index, character in enumerate(_OPERAND_SPECIAL)}
_OPERAND_UNMARK = {mark: character for character, mark in _OPERAND_MARKS.items()}


def _scan(written: str, stop: str = ""):
    """Walk an operator's word as bash reads it inside ``${...}``: yield (index, character,
    unquoted) for each character outside quotes, escapes and nested ``${ }``/``$( )``; ``stop``:
    end at the first such character in it. ``ValueError`` when a quote or nesting is not closed."""
    index, depth = 0, 0
    while index < len(written):
        character = written[index]
        if character == "\\":
            index += 2
            continue
        if character == "'" or written.startswith("$'", index):
            start = index + (2 if character == "$" else 1)
            end = start
            while end < len(written) and written[end] != "'":
                end += 2 if written[end] == "\\" and character == "$" else 1
            if end >= len(written):
                raise ValueError("an unclosed quote")
            index = end + 1
            continue
        if character == '"':
            end = index + 1
            while end < len(written) and written[end] != '"':
                end += 2 if written[end] == "\\" else 1
            if end >= len(written):
                raise ValueError("an unclosed quote")
            index = end + 1
            continue
        if written.startswith(("${", "$("), index):
            depth += 1
            index += 2
            continue
        if depth and character in "})":
            depth -= 1
            index += 1
            continue
        if not depth:
            yield index, character
        index += 1
    if depth:
        raise ValueError("an unclosed ${ or $(")


def _split_replacement(written: str, operator: str) -> tuple:
    """``${V/pattern/replacement}``'s text after the operator: (pattern, whether a / ends it,
    replacement); (None, ...) when bash's reading of it is not found. As bash, a pattern of ``/``
    or ``//`` that starts with ``/`` keeps it (``${V///}`` removes every slash)."""
    skip = operator in ("/", "//") and written.startswith("/")
    try:
        for index, character in _scan(written):
            if character == "/" and not (skip and index == 0):
                return written[:index], True, written[index + 1:]
    except ValueError:
        return None, False, ""
    return written, False, ""


def _mark_blanks(written: str) -> Optional[str]:
    """``written`` with its unquoted characters that would end or change a word (blanks, ``;&|<>(){}#``)
    as private-use characters (``_OPERAND_MARKS``), so that it parses as one word."""
    if any(mark in written for mark in _OPERAND_UNMARK):
        return None
    out = list(written)
    try:
        for index, character in _scan(written):
            if character in _OPERAND_MARKS:
                out[index] = _OPERAND_MARKS[character]
    except ValueError:
        return None
    return "".join(out)


def _literal_pieces(written: str, split: bool, tilde, ends: tuple, assignment: bool) -> list:
    """A literal part of an operator's word: escaped characters literal, the rest ``split`` and
    active; a tilde-prefix (up to ``/``, ``:`` or the word's end, nothing quoted in it) expanded by
    ``tilde`` when given, at the word's start and, in an ``assignment``, after a ``:`` (``ends``:
    whether this part starts the word, whether it ends it)."""
    written = "".join(_OPERAND_UNMARK.get(character, character) for character in written)
    found = []
    for match in re.finditer(r"\\(.)|[^\\]+|\\$", written, re.S):
        if match.group(1) is not None:
            found.append(Piece(match.group(1), False, False))
            continue
        segment, done = match.group(0), 0
        for prefix in re.finditer(r"~[^/:]*", segment) if tilde is not None else ():
            at, end = prefix.span()
            placed = (ends[0] and match.start() + at == 0) or (assignment and segment[at - 1:at] == ":")
            if not placed or (end == len(segment) and (match.end() != len(written) or not ends[1])):
                continue
            expanded = tilde(prefix.group(0))
            if expanded != prefix.group(0):
                found += [Piece(segment[done:at], split, True)] * (at > done) + [Piece(expanded, False, False)]
                done = end
        if done < len(segment):
            found.append(Piece(segment[done:], split, True))
    return found


def _replacer(pieces: list, node, reader: Shell):
    """bash 5.2's replacement (``patsub_replacement``): an unquoted ``&`` is the matched text, ``\\&``
    a literal ``&``; quoted parts literal. A function of the matched text."""
    segments: list = []
    for piece in pieces:
        if not piece.active:
            segments.append(piece.text)
            continue
        for match in re.finditer(r"\\&|\\\\|&|[^&\\]+|\\", piece.text):
            found = match.group(0)
            if found == "\\\\":
                raise reader.refuse(node, "check does not model \\\\ in an expanded replacement")
            segments.append(None if found == "&" else "&" if found == "\\&" else found)
    return lambda matched: "".join(matched if segment is None else segment for segment in segments)


def _whole_value(reader: Shell, node, value) -> None:
    """Refuse an assignment whose value tree-sitter-bash starts after a part of it (``A=\\<tab>"x"``)."""
    if value is None:
        return
    operator = next((child for child in node.children if child.type in ("=", "+=")), None)
    if operator is not None and operator.end_byte != value.start_byte:
        raise reader.refuse(node, "tree-sitter-bash leaves part of this assignment's value out")


def _gap(before, after) -> Optional[bytes]:
    """The source between two sibling nodes (``None`` when they are not siblings)."""
    parent = before.parent
    if parent is None or after.parent is None or parent != after.parent:
        return None
    return parent.text[before.end_byte - parent.start_byte:after.start_byte - parent.start_byte]


def _gap_parts(gap: bytes) -> Optional[tuple]:
    """What lies between two nodes of a command when it is only blanks, escaped blanks and
    backslash-newlines: (escaped blanks ending the word before, whether a blank separates the
    words, escaped blanks starting the next one); ``None`` for anything else."""
    suffix, prefix, separate, index = "", "", False, 0
    while index < len(gap):
        pair = gap[index:index + 2]
        if pair == b"\\\n":
            index += 2
        elif pair in (b"\\ ", b"\\\t"):
            if separate:
                prefix += chr(pair[1])
            else:
                suffix += chr(pair[1])
            index += 2
        elif gap[index] in b" \t":
            if prefix:
                return None
            separate = True
            index += 1
        else:
            return None
    return suffix, separate, prefix


def _only_all(node) -> bool:
    """Whether a double-quoted string is exactly ``"$@"`` or ``"${a[@]}"``, or a slice of them
    (``"${a[@]:1}"``: no empty field of its own; ``"${@:-}"`` is not one)."""
    named = [child for child in node.children if child.is_named]
    if len(named) != 1 or text(node) not in (f'"{text(named[0])}"',):
        return False
    written = text(named[0])
    return written in ("$@", "${@}") or bool(re.fullmatch(r"\$\{(\w+\[@\]|@)(:(?![-=+?]).*)?\}", written, re.S))


def _in_string(node) -> bool:
    """Whether ``node`` is inside double quotes."""
    while node is not None and node.type not in ("command", "variable_assignment", "case_statement"):
        if node.type in ("string", "translated_string"):
            return True
        node = node.parent
    return False


def _in_assignment(node) -> bool:
    """Whether ``node`` is in an assignment's value, outside double quotes."""
    while node is not None and node.type not in ("command", "string", "translated_string"):
        if node.type == "variable_assignment":
            return True
        node = node.parent
    return False


def _leading_blanks(node) -> int:
    """How many bytes of blanks (and backslash-newlines) ``node``'s range holds before its own text."""
    if node.type == "string_content":
        return 0
    return len(re.match(rb"(?:[ \t\n]|\\\n)*", node.text).group(0))


def _misparsed(node) -> bool:
    """Whether tree-sitter-bash left a ``$`` before a name as a token of its own (not an expansion)."""
    source = node.text
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == "$" and not current.is_named and current.parent is not None and \
                current.parent.type != "simple_expansion":
            after = source[current.end_byte - node.start_byte:current.end_byte - node.start_byte + 1]
            if after and (after.isalpha() or after == b"_"):
                return True
        stack.extend(current.children)
    return False


def _braced(written: str) -> str:
    """``$name`` as ``${name}`` outside single quotes (what bash expands the same)."""
    out, single, double, index = [], False, False, 0
    while index < len(written):
        character = written[index]
        if character == "\\" and not single:
            out.append(written[index:index + 2])
            index += 2
            continue
        if character == "'" and not double:
            single = not single
        elif character == '"' and not single:
            double = not double
        elif character == "$" and not single:
            match = re.match(r"[A-Za-z_]\w*", written[index + 1:])
            if match:
                out.append("${" + match.group(0) + "}")
                index += 1 + match.end()
                continue
        out.append(character)
        index += 1
    return "".join(out)


def _clauses(children) -> list:
    """(condition, body) of an ``if``/``elif``: the statements before ``then`` and after it."""
    condition, body, seen_then = [], [], False
    for child in children:
        if child.type in ("elif_clause", "else_clause", "fi"):
            break
        if child.type == "then":
            seen_then = True
        elif child.is_named and child.type != "comment":
            (body if seen_then else condition).append(child)
    return [(condition, body)]


def _stdout_redirected(redirect) -> bool:
    """Whether a redirection sends standard output elsewhere (``> f``, ``&> f``, ``>&2``; not ``2> f``)."""
    if redirect.type != "file_redirect":
        return False
    written = text(redirect).strip()
    match = re.match(r"(\d*)(&>>?|>>?|>\||>&)", written)
    return match is not None and match.group(1) in ("", "1")


def _is_test(node) -> bool:
    """Whether ``node`` is a test (``[ ]``, ``[[ ]]``, ``test``): its unknown value is never assumed."""
    if node.type == "test_command":
        return True
    name = node.child_by_field_name("name") if node.type == "command" else None
    return name is not None and text(name) in ("[", "test")


def _expands(node) -> bool:
    """Whether a word of ``node`` holds an expansion (its value is known only when read)."""
    if node.type in ("simple_expansion", "expansion", "command_substitution", "arithmetic_expansion",
                     "process_substitution"):
        return True
    return any(_expands(child) for child in node.children)


def _inert(node, functions: Mapping) -> bool:
    """Whether ``node`` changes nothing this reading tracks: no assignment, no state-changing
    builtin (``printf -v`` among them), no call of the script's functions, no output to a file,
    no mention of main_ppo, and no program but a harmless one (``_HARMLESS_COMMANDS``) given words
    that hold expansions (``python3 -m $M`` or ``"${CMD[@]}"`` may start main_ppo)."""
    if node is None:
        return True
    if "main_ppo" in text(node):
        return False
    if node.type in _STATEFUL_NODES:
        return False
    if node.type == "file_redirect" and not re.search(r">\s*/dev/null|>&\s*\d", text(node)):
        return False
    if node.type == "command_name":
        name = text(node)
        if name in _STATEFUL_COMMANDS or name in functions or not re.fullmatch(r"[\w./:+-]+", name):
            return False
    if node.type == "command" and text(node).split()[:2] == ["printf", "-v"]:
        return False
    if node.type == "command":
        name = node.child_by_field_name("name")
        harmless = name is not None and os.path.basename(text(name)) in _HARMLESS_COMMANDS
        if not harmless and _expands(node):
            return False
    if any(child.type in ("++", "--") for child in node.children) or (
            node.type == "binary_expression" and node.named_children[:1] and node.named_children[0].type ==
            "variable_name" and any(c.type in _ARITHMETIC_ASSIGN for c in node.children)):
        return False  # an assignment in arithmetic
    return all(_inert(child, functions) for child in node.children)
