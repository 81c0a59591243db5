"""Variables and bash's scoping of them (docs/contract.md section 6.5): assignment (arrays,
``+=``, bounds on what is held), lookup (bash's own variables, ``set -u``), function locals and
the dynamic scope of ``declare -g`` and ``unset``, and the traps checked at the end."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

from verl_rfpp.bash_reader import parse, words
from verl_rfpp.bash_reader.parse import ReadError, line, text
from verl_rfpp.bash_reader.state import Exit, Several, scalar
from verl_rfpp.bash_reader.syntax import inert

if TYPE_CHECKING:
    from verl_rfpp.bash_reader.shell import Shell

MAX_VALUE = 1 << 16  # characters in one value
MAX_HELD = 1 << 24  # characters in all values together

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
SPECIAL_ASSIGNMENTS = BASH_OWN - {"IFS", "HOSTNAME", "OLDPWD", "PS1", "PS2", "PS4", "COLUMNS", "LINES",
                                   "HISTFILE", "HISTFILESIZE", "HISTSIZE", "MAILCHECK", "OPTERR", "_"} | {
    "CDPATH", "GLOBIGNORE", "POSIXLY_CORRECT", "BASH_ENV", "ENV", "BASH_XTRACEFD", "BASH_COMPAT"}
# In the environment bash starts from, these change how it reads the script.
STARTUP_VARIABLES = ("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "POSIXLY_CORRECT", "CDPATH", "GLOBIGNORE",
                     "BASH_COMPAT", "BASH_XTRACEFD")


class Variables:
    """Assignment, lookup and scopes of variables."""

    # --- lookup -----------------------------------------------------------------------------------

    def lookup(self, name_node, strict: bool = False):
        """A parameter's value (``Several`` for ``$@``, ``$*``, ``${a[@]}``). ``strict``: under
        ``set -u`` an unset one ends the shell with status 1, as bash's does."""
        name = text(name_node)
        if name_node.type == "subscript":
            return self.subscript(name_node, strict)
        if name in ("@", "*"):
            return Several(list(self.positional), joined=name == "*")
        if name == "#":
            return str(len(self.positional))
        if name == "?":
            return self.unknown(name_node, "$?") if self.status is None else str(self.status)
        if name.isdigit():
            return self.lookup_parameter(name, strict)
        if name in self.variables:
            return scalar(self.variables[name])
        if name == "LINENO":
            return self.lineno(name_node)
        if name == "PWD":
            return self.cwd
        if name == "IFS":
            return words.DEFAULT_IFS
        if name == "BASH_SOURCE":
            return self.files[-1]
        if name in BASH_OWN or name in ("$", "!", "-"):
            return self.unknown(name_node, f"${name}")
        return self.unset_value(name, strict)

    def lineno(self, node) -> str:
        """``$LINENO``: the line it is on, where its command starts on that line too (bash counts a
        command's lines in ways check does not model)."""
        statement = node
        while statement.parent is not None and not statement.type.endswith(("command", "statement", "assignment")):
            statement = statement.parent
        if b"\n" in statement.text[:node.start_byte - statement.start_byte]:
            raise self.refuse(node, "$LINENO in a command that starts on an earlier line")
        return str(line(node))

    def unset_value(self, name: str, strict: bool) -> str:
        if strict and "nounset" in self.state.options:
            self.note(None, f"ends the script: {name} is unset under set -u (bash exits with status 1)")
            raise Exit(1)
        return ""

    def is_set(self, target) -> bool:
        name = text(target)
        if target.type == "subscript":
            base = text(target.child_by_field_name("name"))
            value = self.variables.get(base)
            index = text(target.child_by_field_name("index"))
            if index in ("@", "*"):
                return bool(value)
            position = self.arithmetic_value(target, *self.inside(target, "["))
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
            if name in self.unset_own:
                raise self.refuse(node, f"whether bash's {name} is set after the script's unset of it")
            if name == "FUNCNAME":
                return bool(self.state.locals)
            if name in ALWAYS_SET or name in NEVER_SET:
                return name in ALWAYS_SET
            raise self.refuse(node, f"whether bash's {name} is set depends on how bash was started")
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise self.refuse(node, f"check does not model this test of {name!r}")
        return False

    # --- assignment and scopes --------------------------------------------------------------------

    def check_assignable(self, name: str, node) -> None:
        if name in self.state.readonly:
            raise self.refuse(node, f"an assignment to the readonly {name} (bash's error)")
        if name in SPECIAL_ASSIGNMENTS:
            raise self.refuse(node, f"check does not model assigning bash's {name}")

    def assign(self, node, local: bool = False, array: bool = False, global_: bool = False) -> str:
        """``NAME=VALUE``, ``NAME+=VALUE``, ``NAME=(...)``; ``global_``: ``declare -g``, which sets the
        global even where a caller's ``local`` shadows it (that local keeps its value)."""
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        whole_value(self, node, value_node)
        if name_node.type == "subscript":
            raise self.refuse(node, "check does not evaluate assignments to array elements")
        name = text(name_node)
        self.check_assignable(name, node)
        scope = self.outermost_local(name) if global_ else None
        if local:
            self.make_local(name, node)
        append = any(child.type == "+=" for child in node.children)
        old = self.variables.get(name) if scope is None else scope[name]
        if value_node is not None and value_node.type == "array":
            if any(re.match(r"\[[^]]*\]=", text(child)) for child in value_node.named_children):
                raise self.refuse(node, "check does not model arrays with explicit indices")
            value = self.fields(value_node.named_children)
            if append and old is not None:
                value = (old if isinstance(old, list) else [old]) + value
        else:
            value = self.one_word(value_node, assignment=True)
            if append and isinstance(old, list):  # A+=x on an array appends to its element 0
                value = [(old[0] if old else "") + value] + old[1:]
            elif append and old is not None:
                value = old + value
            elif array:
                value = [value]
        if scope is None:
            self.set_variable(name, value, node)
        else:
            if (sum(map(len, value)) if isinstance(value, list) else len(value)) > MAX_VALUE:
                raise self.refuse(node, f"a value of over {MAX_VALUE} characters")
            scope[name] = value
        return name

    def outermost_local(self, name: str) -> Optional[dict]:
        """The scope of the outermost function call where ``name`` is local (it holds the global's
        value while the call lasts), or ``None``."""
        return next((scope for scope in self.state.locals if name in scope), None)

    def set_variable(self, name: str, value, node) -> None:
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

    def make_local(self, name: str, node) -> None:
        if name in self.state.readonly:
            raise self.refuse(node, f"local of the readonly {name} (bash's error)")
        if self.state.locals and name not in self.state.locals[-1]:
            self.state.locals[-1][name] = self.variables.get(name)

    def check_traps(self) -> None:
        for where, action in self.state.traps.values():
            root = parse.parse_script(action.encode(errors="surrogateescape"), "a trap's action")
            if not inert(root, self.state.functions):
                raise ReadError(where, action[:80], "a trap runs this when the script ends or is signalled, and "
                                "check does not model traps that change what runs")


def whole_value(reader: Shell, node, value) -> None:
    """Refuse an assignment whose value tree-sitter-bash starts after a part of it (``A=\\<tab>"x"``)."""
    if value is None:
        return
    operator = next((child for child in node.children if child.type in ("=", "+=")), None)
    if operator is not None and operator.end_byte != value.start_byte:
        raise reader.refuse(node, "tree-sitter-bash leaves part of this assignment's value out")
