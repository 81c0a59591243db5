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

from verl_rfpp.tools.reader import arithmetic, builtins, parse, words
from verl_rfpp.tools.reader.parse import ReadError, construct, line, text
from verl_rfpp.tools.reader.state import Answer, Command, Exit, LoopControl, Return, State, Status, scalar
from verl_rfpp.tools.reader.words import BREAK, Piece, Unsupported

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
                                 "variable_assignments") or (node.type == "compound_statement" and
                                                             text(node).startswith("(("))
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
        self.state.functions[name] = node.child_by_field_name("body")
        return 0

    def _do_compound_statement(self, node) -> Status:
        if text(node).startswith("(("):
            expression = node.named_children
            value = self._arithmetic(expression[-1]) if expression else 0
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
                name = self._assign(child, local=local, array="a" in flags)
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
            if mode != "-f" and (name in self.variables or mode == "-v"):
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
        prefix = {}
        for child in assignments:
            name = text(child.child_by_field_name("name"))
            if name in _SPECIAL_ASSIGNMENTS or name in self.state.readonly or any(c.type == "+=" for c in
                                                                                    child.children):
                raise self.refuse(child, f"check does not model this assignment to {name}")
            value = child.child_by_field_name("value")
            prefix[name] = self._one(value, assignment=True) if value is not None else ""
        return self.run(fields, node, prefix)

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
        try:
            return run()
        finally:
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
        try:
            return self._statement(self.state.functions[name])
        except Return as stop:
            return stop.status
        finally:
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
        for node in nodes:
            if node.type == "comment":
                continue
            if node.type in ("word", "concatenation") and words.may_brace_expand(text(node)):
                raise self.refuse(node, "check does not model brace expansion ({a,b}, {1..3}); quote the word")
            assignment = "word" if arguments and re.match(r"[A-Za-z_]\w*=", text(node)) else False
            pieces = self._pieces(node, quoted=False, assignment=assignment)
            fields = [words.as_bytes(field) for field in words.split(pieces, ifs)]
            if "noglob" not in self.state.options:
                self._check_glob(pieces, node)
            found.extend(fields)
            if len(found) > MAX_FIELDS:
                raise self.refuse(node, f"over {MAX_FIELDS} words")
        return found

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
            for index, child in enumerate(node.children):
                found.extend(self._pieces(child, quoted, pattern, assignment, start and index == 0))
            return found
        if kind in ("simple_expansion", "expansion", "command_substitution", "arithmetic_expansion"):
            found = self._expanded(node, quoted)
            if pattern:  # an unquoted expansion in a pattern or regex is itself pattern text
                return [piece if piece is BREAK else Piece(piece.text, piece.split, True) for piece in found]
            return found
        raise self.refuse(node, f"check does not evaluate bash's {kind.replace('_', ' ')}")

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
            if name.type == "variable_name" and text(name).isdigit() and len(text(name)) > 1:
                first = self.positional[0] if self.positional else self._unset("1", strict=True)
                return [Piece(first + text(name)[1:], not quoted, not quoted)]  # $10 is ${1}0
            return self._value_pieces(self._lookup(name, strict=True), quoted, node)
        if kind == "expansion":
            return self._expansion(node, quoted)
        if kind == "command_substitution":
            return [Piece(self.substitute(node), not quoted, not quoted)]
        return [Piece(self._arithmetic_text(node), not quoted, not quoted)]

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
        for child in node.children:
            if not child.is_named:
                continue
            # tree-sitter-bash starts an expansion's node at the blanks before its ``$`` (they have
            # no node of their own): they are the string's text, read from the bytes
            begins = child.start_byte + _leading_blanks(child)
            if begins > position:
                gap = data[position - node.start_byte:begins - node.start_byte].decode(errors="surrogateescape")
                pieces.append(Piece(words.unescape_double(gap), False, False))
            if child.type == "string_content":
                pieces.append(Piece(words.unescape_double(text(child)), False, False))
            else:
                pieces.extend(self._pieces(child, quoted=True))
            position = child.end_byte
        if node.end_byte - 1 > position:
            gap = data[position - node.start_byte:node.end_byte - 1 - node.start_byte].decode(errors="surrogateescape")
            pieces.append(Piece(words.unescape_double(gap), False, False))
        pieces = [Piece(p.text, False, False) if p is not BREAK else p for p in pieces]
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
        if name == "0":
            return self.invoked_as
        if name.isdigit():
            index = int(name)
            if index <= len(self.positional):
                return self.positional[index - 1]
            return self._unset(name, strict)
        if name in self.variables:
            return scalar(self.variables[name])
        if name == "LINENO":
            return self._lineno(name_node)
        if name == "PWD":
            return self.cwd
        if name == "IFS":
            return words.DEFAULT_IFS
        if name == "BASH_SOURCE":
            return self.invoked_as
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
            position = self._arithmetic(target.child_by_field_name("index"))
            items = value if isinstance(value, list) else ([] if value is None else [value])
            return position is not None and -len(items) <= position < len(items)
        if name.isdigit():
            return name == "0" or 0 < int(name) <= len(self.positional)
        if name in ("@", "*", "#", "?", "0"):
            return True
        return name in self.variables or name in ("LINENO", "PWD", "IFS", "BASH_SOURCE")

    def _subscript(self, node, strict: bool = False):
        name = text(node.child_by_field_name("name"))
        index_node = node.child_by_field_name("index")
        index = text(index_node)
        if name in BASH_OWN and name not in self.variables:
            if name == "BASH_SOURCE":
                value = [self.invoked_as]
            elif index in ("@", "*"):
                raise self.refuse(node, f"check does not model bash's {name}")
            else:
                return self.unknown(node, f"${{{text(node)}}}")
        else:
            value = self.variables.get(name)
        items = value if isinstance(value, list) else ([] if value is None else [value])
        if index in ("@", "*"):
            return _All(list(items), joined=index == "*")
        position = self._arithmetic(index_node)
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
            if isinstance(value, _All):
                return [Piece(str(len(value.items)), not quoted, not quoted)]
            if self.is_unknown(value):
                return [Piece(self.unknown(node), not quoted, not quoted)]
            return [Piece(str(len(value)), not quoted, not quoted)]
        if not rest:
            return self._value_pieces(value, quoted, node)
        operands = rest[1:]
        if defaulting:
            return self._defaulting(node, target, name, value, operator, operands, quoted)
        if isinstance(value, _All):
            if operator == ":":
                return self._value_pieces(self._slice_all(node, name, value, operands), quoted, node)
            raise self.refuse(node, "check does not evaluate this expansion of a list")
        if self.is_unknown(value):
            return [Piece(self.unknown(node), not quoted, not quoted)]
        return [Piece(self._transformed(node, value, operator, operands), not quoted, not quoted)]

    def _defaulting(self, node, target, name: str, value, operator: str, operands, quoted: bool) -> list:
        """``${V:-w}``, ``${V-w}``, ``${V:=w}``, ``${V=w}``, ``${V:+w}``, ``${V+w}``, ``${V:?w}``,
        ``${V?w}``: the word is expanded only when it is used, as bash does."""
        if isinstance(value, _All):  # set: any element; null: the elements joined ("$*"'s way for [*]) empty
            separator = scalar(self.variables.get("IFS", " "))[:1] if value.joined and _in_string(node) else " "
            present = bool(separator.join(value.items) if operator.startswith(":") else value.items)
            if operator.startswith(":") and value.items and not any(value.items) and quoted and not _in_string(node):
                raise self.refuse(node, "check does not model this test of empty elements outside quotes (bash "
                                        "reads it one way in arguments and [[ ]], another in assignments and case)")
        else:
            if self.is_unknown(value) and operator.startswith(":"):
                raise self.refuse(node, "whether this value is empty is not known")
            present = self._is_set(target) and not (operator.startswith(":") and value == "")

        def word() -> list:
            pieces = self._operand_pieces(node, operands, quoted)
            return [Piece(p.text, not quoted and p.split, not quoted) if p is not BREAK else p for p in pieces]

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
            joined = "".join(" " if p is BREAK else p.text for p in found)
            self._check_assignable(name, node)
            self._set(name, joined, node)
            return [Piece(joined, not quoted, not quoted)]
        return found

    def _operand_pieces(self, node, operands, quoted: bool) -> list:
        """The word of ``${V-word}`` (and the other defaulting operators) as bash reads it, its text
        between expansions from the source bytes (tree-sitter-bash has no node for blanks there):
        inside double quotes a backslash quotes only ``$ ` " \\ }`` and a newline, single quotes
        are literal and ``~`` is itself; outside them, quote removal and ``~`` at the start."""
        if not operands:
            return []
        data, base = node.text, node.start_byte
        start, end = operands[0].prev_sibling.end_byte, node.end_byte - 1
        if not data.endswith(b"}"):
            raise self.refuse(node, "check cannot read this expansion's word")
        parts = [c for o in operands if o.is_named for c in (o.children if o.type == "concatenation" else [o])]
        quoted = _in_string(node)
        pieces: list = []
        position = start

        def literal(upto: int) -> None:
            written = data[position - base:upto - base].decode(errors="surrogateescape")
            if re.search(r"(?<!\\)(?:\\\\)*[$`\"" + ("" if quoted else "'") + "]", written):
                raise self.refuse(node, "check cannot read this expansion's word")
            if quoted:
                pieces.append(Piece(re.sub(r'\\([$`"\\}\n])', lambda m: "" if m.group(1) == "\n" else m.group(1),
                                           written), False, False))
            else:
                written = self._tilde(written, node, _in_assignment(node), position == start)
                pieces.append(Piece(words.unescape_unquoted(written), False, True))

        for part in parts:
            if not part.is_named or part.type in ("word", "number"):
                continue
            begins = part.start_byte + _leading_blanks(part)
            if begins > position:
                literal(begins)
            if quoted and part.type == "raw_string":
                if re.search(r"[$`\\\"]", text(part)):
                    raise self.refuse(node, "check cannot read this expansion's word")
                pieces.append(Piece(text(part), False, False))
            elif quoted and part.type == "ansi_c_string":
                raise self.refuse(node, "check does not model $'...' inside a double-quoted expansion")
            else:
                pieces.extend(self._pieces(part, quoted=True))
            position = part.end_byte
        if end > position:
            literal(end)
        return pieces

    def _bounds(self, node, operands) -> list:
        """The offset and (when written) the length of ``${V:offset:length}``, an empty one 0 as in
        bash (``None``: not known); ``${V:}`` is bash's error."""
        if not operands and node.text.endswith(b":}"):
            raise self.refuse(node, "an empty offset (bash's error: bad substitution)")
        colon = next((index for index, o in enumerate(operands) if o.type == ":" and not o.is_named), None)
        numbers = []
        for group in [operands] if colon is None else [operands[:colon], operands[colon + 1:]]:
            named = [o for o in group if o.is_named and o.type != "comment"]
            if len(named) > 1:
                raise self.refuse(node, "check cannot read the bounds of this slice")
            numbers.append(self._arithmetic(named[0]) if named else 0)
        return numbers

    def _slice_all(self, node, name: str, value: _All, operands) -> _All:
        numbers = self._bounds(node, operands)
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

    def _transformed(self, node, value: str, operator: str, operands) -> str:
        if operator in ("/", "//", "/#", "/%"):
            split = next((i for i, o in enumerate(operands) if o.type == "/" and not o.is_named), len(operands))
            pattern = [p for o in operands[:split] for p in self._pieces(o, True, pattern=True)]
            replacement = "".join(p.text for o in operands[split + 1:] for p in self._pieces(o, True) if p is not BREAK)
            self._known(pattern + [Piece(replacement, False, False)], node)
            return self._bounded(words.replace(value, words.Pattern(pattern), replacement, operator), node)
        if operator in ("#", "##", "%", "%%"):
            pattern = [p for o in operands if o.is_named for p in self._pieces(o, True, pattern=True)]
            self._known(pattern, node)
            return words.trim(value, words.Pattern(pattern), operator)
        if operator in (",,", ",", "^^", "^"):
            if operands or not value.isascii():
                raise self.refuse(node, "check does not model case changes of non-ASCII text or by a pattern")
            return {",,": value.lower(), "^^": value.upper(), ",": value[:1].lower() + value[1:],
                    "^": value[:1].upper() + value[1:]}[operator]
        if operator == ":":
            numbers = self._bounds(node, operands)
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
        if len(node.named_children) > 1:
            raise self.refuse(node, "check does not evaluate this arithmetic")
        value = self._arithmetic(node.named_children[0]) if node.named_children else 0
        return self.unknown(node) if value is None else str(value)

    def _arithmetic(self, node, depth: int = 0) -> Optional[int]:
        """An arithmetic expression's 64-bit value (``None``: it holds an unknown value)."""
        kind = node.type
        if kind in ("number", "word", "string", "simple_expansion", "expansion", "command_substitution",
                    "concatenation", "raw_string"):
            written = self._one(node) if kind != "word" or "$" in text(node) else text(node)
            return self._number(written, node, depth)
        if kind == "variable_name":
            return self._number(text(node), node, depth)
        if kind == "parenthesized_expression":
            return self._arithmetic(node.named_children[0], depth)
        if kind == "unary_expression":
            operator = text(node.children[0])
            if operator in ("++", "--"):
                raise self.refuse(node, "check does not model ++ and -- (they assign)")
            value = self._arithmetic(node.named_children[-1], depth)
            return None if value is None else arithmetic.unary(operator, value)
        if kind == "ternary_expression":
            condition = self._arithmetic(node.child_by_field_name("condition"), depth)
            if condition is None:
                return None
            branch = node.child_by_field_name("consequence" if condition else "alternative")
            return self._arithmetic(branch, depth)
        if kind == "binary_expression":
            operator = text(next(child for child in node.children if not child.is_named))
            if operator.endswith("=") and operator not in ("==", "!=", "<=", ">="):
                raise self.refuse(node, "check does not model assignments in arithmetic")
            left_node, right_node = node.named_children[0], node.named_children[-1]
            left = self._arithmetic(left_node, depth)
            if operator in ("&&", "||") and left is not None and bool(left) == (operator == "||"):
                return int(bool(left))
            right = self._arithmetic(right_node, depth)
            if left is None or right is None:
                return None
            return arithmetic.binary(operator, left, right)
        raise self.refuse(node, f"check does not evaluate this arithmetic ({kind.replace('_', ' ')})")

    def _number(self, written: str, node, depth: int) -> Optional[int]:
        if self.is_unknown(written):
            return None
        stripped = written.strip()
        if not stripped:
            return 0
        if re.fullmatch(r"[A-Za-z_]\w*", stripped):
            return self._variable_number(stripped, node, depth)
        if stripped[0] in "+-":
            return arithmetic.unary(stripped[0], self._number(stripped[1:], node, depth) or 0)
        return arithmetic.integer(stripped)

    def _variable_number(self, name: str, node, depth: int) -> Optional[int]:
        if depth > 16:
            raise self.refuse(node, "variables that name each other over 16 levels deep in arithmetic")
        if name not in self.variables and name not in BASH_OWN:
            self._unset(name, strict=True)
            return 0
        value = self._lookup_name(name, node)
        if self.is_unknown(value):
            return None
        stripped = value.strip()
        if not stripped:
            return 0
        if re.fullmatch(r"[A-Za-z_]\w*", stripped):
            return self._variable_number(stripped, node, depth + 1)
        if not re.fullmatch(r"[-+]?[0-9A-Za-z#@_]+", stripped):
            raise self.refuse(node, f"{name}={value[:20]!r} is an expression bash would evaluate; check does not")
        sign = -1 if stripped.startswith("-") else 1
        return arithmetic.wrap(sign * arithmetic.integer(stripped.lstrip("+-")))

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
                a, b = self._arithmetic(left_node), self._arithmetic(right_node)
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
        """``-v NAME``, ``-v NAME[N]`` (N an integer; negative counts from the end), ``-v N`` (a
        positional parameter); anything else (an arithmetic index, bash's own variables) refused."""
        element = re.fullmatch(r"([A-Za-z_]\w*)\[\s*(-?[0-9]+)\s*\]", operand)
        name = element.group(1) if element else operand
        if re.fullmatch(r"[0-9]+", operand):
            return int(operand) <= len(self.positional)
        if not re.fullmatch(r"[A-Za-z_]\w*", name) or (name in BASH_OWN and name not in self.variables):
            raise self.refuse(node, f"check does not model -v {operand}")
        if not element:
            return name in self.variables
        value = self.variables.get(name)
        items = value if isinstance(value, list) else ([] if value is None else [value])
        index = int(element.group(2))
        if index < 0 and index + len(items) < 0:
            raise self.refuse(node, f"-v {operand}: a subscript before the first element (bash's error)")
        return index < len(items) if index >= 0 else True

    # --- variables ----------------------------------------------------------------------------

    def _check_assignable(self, name: str, node) -> None:
        if name in self.state.readonly:
            raise self.refuse(node, f"an assignment to the readonly {name} (bash's error)")
        if name in _SPECIAL_ASSIGNMENTS:
            raise self.refuse(node, f"check does not model assigning bash's {name}")

    def _assign(self, node, local: bool = False, array: bool = False) -> str:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        if name_node.type == "subscript":
            raise self.refuse(node, "check does not evaluate assignments to array elements")
        name = text(name_node)
        self._check_assignable(name, node)
        if local:
            self._make_local(name, node)
        append = any(child.type == "+=" for child in node.children)
        if value_node is not None and value_node.type == "array":
            if any(re.match(r"\[[^]]*\]=", text(child)) for child in value_node.named_children):
                raise self.refuse(node, "check does not model arrays with explicit indices")
            items = self._fields(value_node.named_children)
            if append:
                old = self.variables.get(name, [])
                items = (old if isinstance(old, list) else [old]) + items
            self._set(name, items, node)
        else:
            value = self._one(value_node, assignment=True)
            if append:
                old = self.variables.get(name, "")
                if isinstance(old, list):
                    self._set(name, old + [value], node)
                    return name
                value = old + value
            self._set(name, [value] if array else value, node)
        return name

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


_ARITHMETIC_ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "^=", "|="}
_WORDS = {"word", "string", "raw_string", "ansi_c_string", "simple_expansion", "expansion", "concatenation",
          "command_substitution", "arithmetic_expansion", "number", "translated_string", "extglob_pattern", "regex"}
def _only_all(node) -> bool:
    """Whether a double-quoted string is exactly ``"$@"`` or ``"${a[@]}"`` (no empty field of its own)."""
    named = [child for child in node.children if child.is_named]
    if len(named) != 1 or text(node) not in (f'"{text(named[0])}"',):
        return False
    written = text(named[0])
    return written in ("$@", "${@}") or bool(re.fullmatch(r"\$\{\w+\[@\]\}", written)) or written.startswith("${@:")


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


def _inert(node, functions: Mapping) -> bool:
    """Whether ``node`` changes nothing this reading tracks: no assignment, no state-changing
    builtin (``printf -v`` among them), no call of the script's functions, no output to a file,
    no mention of main_ppo."""
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
    if any(child.type in ("++", "--") for child in node.children) or (
            node.type == "binary_expression" and node.named_children[:1] and node.named_children[0].type ==
            "variable_name" and any(c.type in _ARITHMETIC_ASSIGN for c in node.children)):
        return False  # an assignment in arithmetic
    return all(_inert(child, functions) for child in node.children)
