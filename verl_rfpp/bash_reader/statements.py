"""Statements as bash runs them (docs/contract.md section 6.5): blocks, lists, pipelines,
redirections, ``if``/``case``/``for``/``while``, ``set -e``'s rules, declarations and ``unset``,
and an unknown test that decides a branch (refused unless the branch is inert). ``Statements``
is a part of ``Shell``; a node type's handler is ``_do_<type>``, found by ``statement``."""

from __future__ import annotations

import os
import re
from typing import Optional

from verl_rfpp.bash_reader import builtins, parse, words
from verl_rfpp.bash_reader.parse import line, text
from verl_rfpp.bash_reader.state import Exit, LoopControl, Status
from verl_rfpp.bash_reader.syntax import gap_between, gap_parts, inert, misparsed
from verl_rfpp.bash_reader.variables import BASH_OWN, SPECIAL_ASSIGNMENTS
from verl_rfpp.bash_reader.words import BREAK, Unsupported

LOOP_LIMIT = 5000
STEP_LIMIT = 20000


class Statements:
    """Statements: ``block`` and ``statement`` run a list of nodes and one node."""

    def source_file(self, path: str, node) -> None:
        data = parse.read_bytes(path)
        root = parse.parse_script(data, path)
        self.block(root.children)

    def block(self, nodes) -> None:
        nodes = list(nodes)
        for index, node in enumerate(nodes):
            if not node.is_named or node.type in ("comment", "heredoc_body"):
                continue
            following = nodes[index + 1] if index + 1 < len(nodes) else None
            if following is not None and following.is_named and following.type not in ("comment", "heredoc_body") \
                    and gap_parts(gap_between(node, following) if gap_between(node, following) is not None
                                  else b"?") is not None:
                raise self.refuse(node, "tree-sitter-bash ends this statement inside a word (an escaped character "
                                        "after a quote, a backslash-newline); bash goes on")
            if index + 1 < len(nodes) and nodes[index + 1].type == "&":
                self.in_subshell(lambda node=node: self.statement(node))
                self.status = 0
                continue
            self.status = self.statement(node)
            if "noexec" in self.state.options:
                raise Exit(0)

    def statement(self, node) -> Status:
        self.steps += 1
        if self.steps > STEP_LIMIT:
            raise self.refuse(node, f"reading the script takes over {STEP_LIMIT} steps")
        self.node_line = line(node)
        if misparsed(node):
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
        if "errexit" not in self.state.options or self.ignore_errexit or not triggers or status == 0:
            return status
        if status is None:
            self.note(node, "succeeds (set -e: not run, its exit status is assumed 0)")
            return 0
        raise Exit(status)

    def _ignoring_errexit(self, node) -> Status:
        self.ignore_errexit += 1
        try:
            return self.statement(node)
        finally:
            self.ignore_errexit -= 1

    def _reparsed(self, node) -> Status:
        """A statement tree-sitter-bash splits at a ``$name`` after ``/$name/`` (its grammar takes
        ``a=$X/$y/$z`` for a command): read again with ``${name}``, which bash expands the same."""
        fixed = _braced(text(node))
        source = ("\n" * node.start_point[0] + fixed).encode(errors="surrogateescape")
        root = parse.parse_script(source, str(self.script))
        statements = [child for child in root.named_children if child.type != "comment"]
        if any(misparsed(child) for child in statements):
            raise self.refuse(node, "tree-sitter-bash cannot parse this statement")
        for child in statements:
            self.status = self.statement(child)
        return self.status

    def _do_variable_assignment(self, node) -> Status:
        return self._assignments([node])

    def _do_variable_assignments(self, node) -> Status:
        return self._assignments(node.named_children)

    def _assignments(self, nodes) -> Status:
        """Assignments alone: their status is the last command substitution's in them, else 0."""
        saved, self.substitution_status = self.substitution_status, []
        try:
            for child in nodes:
                self.assign(child)
            found = self.substitution_status
        finally:
            self.substitution_status = saved
        return found[-1] if found else 0

    def _do_function_definition(self, node) -> Status:
        name = text(node.child_by_field_name("name"))
        body = node.child_by_field_name("body")
        self.state.functions[name] = body
        self.defined_in[body] = self.files[-1]
        return 0

    def _do_compound_statement(self, node) -> Status:
        if text(node).startswith("(("):
            value = self.arithmetic_value(node, *self.inside(node))
            return None if value is None else int(value == 0)
        self.block(node.children)
        return self.status

    def _do_subshell(self, node) -> Status:
        return self.in_subshell(lambda: self._block_status(node.children))

    def _block_status(self, nodes) -> Status:
        self.block(nodes)
        return self.status

    def _do_negated_command(self, node) -> Status:
        self.negations += 1
        try:
            status = self._ignoring_errexit(node.named_children[-1])
        finally:
            self.negations -= 1
        return None if status is None else int(status == 0)

    def _do_list(self, node) -> Status:
        left, operator, right = node.children[0], node.children[1].type, node.children[2]
        status = self._ignoring_errexit(left)
        if status is None:
            if inert(right, self.state.functions):
                self.emit(None)  # what it prints, if it runs, is not known
                return None
            if operator == "&&" and not _is_test(left):
                self.note(left, "succeeds (not run; the command after && is read)")
                status = 0
            else:
                raise self.refuse(left, "the exit status of this command decides what runs next, and check does "
                                        "not run it")
        if (status == 0) == (operator == "&&"):
            return self.statement(right)
        return status

    def _do_pipeline(self, node) -> Status:
        parts = [child for child in node.named_children]
        statuses = []
        saved = self.captured
        self.captured = None if saved is None else []  # each part's output feeds the next, not the caller
        try:
            for part in parts:
                statuses.append(self.in_subshell(lambda part=part: self.statement(part)))
        finally:
            self.captured = saved
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
            self.record_write(redirect)
        if body is None:
            return 0
        saved = self.captured
        if saved is not None and any(_stdout_redirected(r) for r in redirects):
            self.captured = []
        fed_before, self.stdin_fed = self.stdin_fed, fed
        try:
            return self.statement(body)
        finally:
            self.stdin_fed = fed_before
            self.captured = saved

    def record_write(self, redirect) -> None:
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
        fields = self.fields(targets)
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
                self.block(block)
                return self.status
            status = None
            for statement in test:
                status = self._ignoring_errexit(statement)
            if status is None:
                rest = [n for _, b in branches[index:] for n in b]
                rest += [n for t, _ in branches[index + 1:] for n in t or []]
                if all(inert(n, self.state.functions) for n in rest):
                    self.emit(None)
                    return None
                raise self.refuse(test[0], "this test decides what the script runs, and its value is not known "
                                           "without running something")
            if status == 0:
                self.block(block)
                return self.status
        return 0

    def _do_case_statement(self, node) -> Status:
        value = self.one_word(node.child_by_field_name("value"))
        items = [child for child in node.named_children if child.type == "case_item"]
        if self.is_unknown(value):
            if all(inert(item, self.state.functions) for item in items):
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
            self.block(body)
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
            gap = (gap_between(before, after) or b"").strip(b" \t")
            values = before.type not in ("(", "|") and after.type not in (")", "|")
            if gap or values:
                raise self.refuse(after, "a case pattern tree-sitter-bash reads otherwise than bash (two words, an "
                                         "escaped blank)")
        for index, child in enumerate(item.children):
            if item.field_name_for_child(index) != "value":
                continue
            pieces = self.pieces(child, quoted=True, pattern=True)
            if any(self.is_unknown(piece.text) for piece in pieces if piece is not BREAK):
                if inert(item, self.state.functions):
                    self.emit(None)
                    return False
                raise self.refuse(child, "this case pattern is not known")
            if words.Pattern(pieces).match(value):
                return True
        return False

    def _do_for_statement(self, node) -> Status:
        name = text(node.child_by_field_name("variable"))
        values = [child for i, child in enumerate(node.children) if node.field_name_for_child(i) == "value"]
        items = self.fields(values) if values else list(self.positional)
        body = node.child_by_field_name("body")
        if any(self.is_unknown(item) for item in items) and not inert(body, self.state.functions):
            statements = [child for child in body.named_children if child.type != "comment"]
            if statements and all(child.type == "unset_command" for child in statements):
                self.note(node, "unsets variables named by output check does not have; the variables that decide "
                                "what verl loads are assumed not among them")
                return 0
            raise self.refuse(node, "the words of this loop are not known")
        status = 0
        self.loop_depth += 1
        try:
            for item in items:
                self.set_variable(name, item, node)
                try:
                    self.block(body.children)
                    status = self.status
                except LoopControl as control:
                    status = 0
                    if control.levels > 1:
                        raise LoopControl(control.kind, control.levels - 1) from None
                    if control.kind == "break":
                        break
        finally:
            self.loop_depth -= 1
        return status

    def _do_while_statement(self, node) -> Status:
        """``while``/``until`` on tests it knows (an argument-parsing loop), at most ``LOOP_LIMIT`` times."""
        until = node.children[0].type == "until"
        body = next(child for child in node.named_children if child.type == "do_group")
        conditions = [child for child in node.named_children if child.type not in ("do_group", "comment")]
        status = 0
        for _ in range(LOOP_LIMIT):
            self.loop_depth += 1  # a break in the test leaves this loop too
            try:
                test = None
                for condition in conditions:
                    test = self._ignoring_errexit(condition)
                if test is None:
                    if inert(node, self.state.functions):
                        self.emit(None)
                        return 0
                    raise self.refuse(node, "this loop's test is not known without running something, and its "
                                            "body changes what the script runs")
                if (test == 0) == until:
                    return status
                self.block(body.children)
                status = self.status
            except LoopControl as control:
                status = 0
                if control.levels > 1:
                    raise LoopControl(control.kind, control.levels - 1) from None
                if control.kind == "break":
                    return 0
            finally:
                self.loop_depth -= 1
        raise self.refuse(node, f"this loop does not end within {LOOP_LIMIT} rounds")

    def _do_c_style_for_statement(self, node) -> Status:
        raise self.refuse(node, "check does not evaluate C-style for loops")

    def _do_test_command(self, node) -> Status:
        expression = list(node.named_children)
        if not text(node).startswith("[["):
                return builtins.BUILTINS["["](self, ["[", *self.test_words(node.children[1:-1]), "]"], node)
        if not expression:
            return 2
        truth = self.conditional(expression[0])
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
                shadowed = self.outermost_local(text(child.child_by_field_name("name"))) if "g" in flags else None
                if shadowed is not None and flags & {"x", "r"}:
                    raise self.refuse(child, f"check does not model declare -{''.join(sorted(flags))} of a name a "
                                             "caller's local shadows")
                name = self.assign(child, local=local, array="a" in flags, global_="g" in flags)
            elif child.type == "variable_name":
                name = text(child)
                if local:
                    self.make_local(name, child)
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
            name = self.one_word(child)
            if name in ("-v", "-f"):
                mode = name
                continue
            if self.is_unknown(name) or not re.fullmatch(r"[A-Za-z_]\w*", name):
                raise self.refuse(child, "check does not model unset of this name")
            if name in self.state.readonly or name in SPECIAL_ASSIGNMENTS:
                raise self.refuse(child, f"unset of {name}")
            if mode != "-f" and any(name in names for names in self.temporary):
                raise self.refuse(child, f"unset of {name} while an `{name}=... command` binding holds it (bash "
                                         "then reveals the value beneath it, which check does not model)")
            if name in BASH_OWN and mode != "-f":
                self.unset_own.add(name)
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
        return self.simple_command(node, groups[-1])


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
