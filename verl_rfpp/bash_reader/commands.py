"""Simple commands (docs/contract.md section 6.5): prefix assignments (left to right, bound for
the command), builtins, the script's functions (their scopes and depth), every other command
handed to ``on_command``, and command substitution's captured output."""

from __future__ import annotations

from typing import Callable, Mapping, Optional

from verl_rfpp.bash_reader import builtins
from verl_rfpp.bash_reader.expansion import MAX_FIELDS
from verl_rfpp.bash_reader.parse import line, text
from verl_rfpp.bash_reader.state import Command, Return, Status
from verl_rfpp.bash_reader.syntax import gap_between, gap_parts
from verl_rfpp.bash_reader.variables import MAX_VALUE, SPECIAL_ASSIGNMENTS, whole_value

MAX_CALL_DEPTH = 50


class Commands:
    """Simple commands, calls and ``$( )``; ``run`` runs expanded fields."""

    def simple_command(self, node, children: list) -> Status:
        assignments, arguments = [], []
        for (child, _), (following, _) in zip(children, children[1:], strict=False):
            gap = gap_between(child, following) if child.type == "variable_assignment" else None
            parts = None if gap is None else gap_parts(gap)
            if parts is not None and (parts[0] or not parts[1]):
                raise self.refuse(child, "tree-sitter-bash ends this assignment's word where bash goes on")
        for child, role in children:
            if child.type == "variable_assignment":
                assignments.append(child)
            elif role in ("name", "argument"):
                arguments.append(child)
            elif child.type in ("herestring_redirect", "heredoc_redirect"):
                self.stdin_fed = True
            elif child.type == "file_redirect":
                self.record_write(child)
        if len(arguments) > MAX_FIELDS:
            raise self.refuse(node, f"a command of over {MAX_FIELDS} words")
        saved, self.substitution_status = self.substitution_status, []
        try:
            fields = self.fields(arguments, arguments=True)
            if not fields:
                for child in assignments:
                    self.assign(child)
                found = self.substitution_status
                return found[-1] if found else 0
        finally:
            self.substitution_status = saved
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
                if name_node.type != "variable_name" or name in SPECIAL_ASSIGNMENTS or \
                        name in self.state.readonly or any(c.type == "+=" for c in child.children):
                    raise self.refuse(child, f"check does not model this assignment to {name}")
                value = child.child_by_field_name("value")
                whole_value(self, child, value)
                prefix[name] = self.one_word(value, assignment=True) if value is not None else ""
                saved.setdefault(name, self.variables.get(name))
                self.variables[name] = prefix[name]
        finally:
            for name, old in saved.items():
                if old is None:
                    self.variables.pop(name, None)
                else:
                    self.variables[name] = old
        return prefix


    def run(self, fields: list, node, prefix: Mapping[str, str] = ()) -> Status:
        """A command's fields: a function of the script, a builtin evaluated here, or ``on_command``."""
        if len(fields) > MAX_FIELDS:
            raise self.refuse(node, f"a command of over {MAX_FIELDS} words")
        name = fields[0]
        if self.is_unknown(name):
            return self.external(fields, node, prefix)
        if name in self.state.functions or name in builtins.BUILTINS:
            if not prefix:
                return self._internal(name, fields, node)
            return self._with_temporary(prefix, lambda: self._internal(name, fields, node))
        return self.external(fields, node, prefix)

    def _internal(self, name: str, fields: list, node) -> Status:
        if name in self.state.functions:
            return self._call(name, fields[1:], node)
        return builtins.BUILTINS[name](self, fields, node)

    def external(self, fields: list, node, prefix: Mapping[str, str] = ()) -> Status:
        answer = self.on_command(self, Command(tuple(fields), line(node), self.environment(prefix), self.stdin_fed))
        self.emit(answer.output)
        return answer.status

    def _with_temporary(self, prefix: Mapping[str, str], run: Callable[[], Status]) -> Status:
        """``A=1 f``: the assignments hold, exported, for the function or builtin only."""
        saved = {name: (self.variables.get(name), name in self.state.exported) for name in prefix}
        for name, value in prefix.items():
            self.set_variable(name, value, None)
            self.state.exported.add(name)
        self.temporary.append(set(prefix))
        try:
            return run()
        finally:
            self.temporary.pop()
            for name, (value, exported) in saved.items():
                if value is None:
                    self.variables.pop(name, None)
                else:
                    self.variables[name] = value
                if not exported:
                    self.state.exported.discard(name)

    def emit(self, output: Optional[str]) -> None:
        """Add to the output of the command substitution being read (``None``: not known)."""
        if self.captured is not None:
            self.captured.append(output)

    def _call(self, name: str, arguments: list, node) -> Status:
        if self.call_depth >= MAX_CALL_DEPTH:
            raise self.refuse(node, f"functions nest deeper than {MAX_CALL_DEPTH} calls")
        saved_positional, loops = self.state.positional, self.loop_depth
        self.state.positional = list(arguments)
        self.state.locals.append({})
        self.call_depth += 1
        self.loop_depth = 0
        body = self.state.functions[name]
        self.files.append(self.defined_in.get(body, self.invoked_as))
        try:
            return self.statement(body)
        except Return as stop:
            return stop.status
        finally:
            self.files.pop()
            self.call_depth -= 1
            self.loop_depth = loops
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
        saved, self.captured = self.captured, []
        status_before = self.status

        def body() -> Status:
            self.block(node.children)
            return self.status

        try:
            status = self.in_subshell(body, errexit=False)
            collected = self.captured
        finally:
            self.captured = saved
            self.status = status_before
        if self.substitution_status is not None:
            self.substitution_status.append(status)
        if any(piece is None for piece in collected):
            return self.unknown(node)
        return self.bounded("".join(collected).rstrip("\n"), node)

    def bounded(self, value: str, node) -> str:
        if len(value) > MAX_VALUE:
            raise self.refuse(node, f"a value of over {MAX_VALUE} characters")
        return value

