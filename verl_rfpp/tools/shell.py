"""A bash script evaluated without running it (docs/contract.md section 6.5): parsed with
tree-sitter-bash, then only the parts whose value bash fixes by itself are evaluated: assignments,
``export``/``local``/``declare``/``unset``, parameter expansions, arithmetic, quoting and word
splitting, ``if``/``elif``/``case``/``[ ]``/``[[ ]]``/``test``, ``for`` over known words,
``&&``/``||``/``;``, functions, ``shift``, ``set --``, ``cd``/``pwd``/``basename``/``dirname``/
``echo`` and ``source`` of a file (read the same way). Every other command is handed to
``on_command``, which answers without running it. A value nothing here can know (the output of an
unknown command, ``$RANDOM``) is a one-character marker (``unknown``); control flow that an
unknown value decides is ``ReadError`` unless no branch changes anything this reading tracks.
Nothing is executed, written or opened other than the script and the files it sources."""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import tree_sitter
import tree_sitter_bash

_PARSER = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
_FIRST_MARKER = 0xF0000  # Unicode's private-use plane 15: never in a script's own text
_IFS = " \t\n"
LOOP_LIMIT = 10000
STEP_LIMIT = 100000
_BREAK = object()  # between the fields of "$@"
Status = Optional[int]  # None: not known without running the command


class ReadError(Exception):
    """A construct the reader cannot evaluate safely: ``line`` (1-based) and ``construct`` name it."""

    def __init__(self, line: int, construct: str, why: str):
        super().__init__(f"line {line}: {why}: {construct}")
        self.line, self.construct, self.why = line, construct, why


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


def _text(node) -> str:
    return node.text.decode(errors="surrogateescape")


def _line(node) -> int:
    return node.start_point[0] + 1


def _construct(node) -> str:
    text = " ".join(_text(node).split())
    return text if len(text) <= 80 else text[:77] + "..."


class _Exit(Exception):
    def __init__(self, status: Status):
        self.status = status


class _Return(_Exit):
    pass


class _LoopControl(Exception):
    def __init__(self, kind: str):
        self.kind = kind


# What a branch may hold and still change nothing the reading tracks (an unknown test may skip it).
_STATEFUL_NODES = {"variable_assignment", "variable_assignments", "declaration_command", "unset_command",
                   "function_definition"}
_STATEFUL_COMMANDS = {"cd", "shift", "set", "source", ".", "eval", "exit", "return", "export", "local", "declare",
                      "typeset", "readonly", "exec", "break", "continue", "read", "unset", "pushd", "popd"}


@dataclass
class Shell:
    """The reading of one script: ``read()`` evaluates it, calling ``on_command`` for every command
    it does not evaluate itself; ``unknowns`` maps each marker to the construct it stands for."""

    script: Path
    arguments: Sequence[str]
    environ: Mapping[str, str]
    on_command: Callable[[Shell, Command], Answer]
    cwd: str = ""
    unknowns: dict = field(default_factory=dict)
    variables: dict = field(default_factory=dict)
    exported: set = field(default_factory=set)
    exported_at: dict = field(default_factory=dict)
    functions: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cwd = self.cwd or os.getcwd()
        self.positional = list(self.arguments)
        self.variables = {**self.environ, **self.variables}
        self.exported = set(self.environ)
        self.status: Status = 0
        self._locals: list[dict] = []
        self._output: Optional[list] = None  # collecting a command substitution's output
        self.assumptions: list = []
        self.loops = 0  # how many loops the reading is inside
        self.steps = 0  # statements evaluated so far (STEP_LIMIT bounds the time a reading takes)

    # --- entry points -------------------------------------------------------------------------

    def read(self) -> Status:
        """Evaluate the whole script; its exit status as far as known."""
        try:
            self._source(self.script, None)
        except _Exit as stop:
            return stop.status
        return self.status

    def unknown(self, node, what: str = "") -> str:
        """A new marker for a value that is not known without running ``node``."""
        marker = chr(_FIRST_MARKER + len(self.unknowns))
        self.unknowns[marker] = (_line(node), what or _construct(node))
        return marker

    def shown(self, text: str) -> str:
        """``text`` with each marker written as the construct it stands for."""
        for marker, (_, construct) in self.unknowns.items():
            text = text.replace(marker, construct)
        return text

    def is_unknown(self, text: str) -> bool:
        return any(marker in text for marker in self.unknowns)

    def environment(self, extra: Mapping[str, str] = ()) -> dict:
        """The environment a command started now would get (``extra``: its own assignments)."""
        found = {name: self._scalar(self.variables[name]) for name in self.exported if name in self.variables}
        found.update(extra)
        return found

    # --- statements ---------------------------------------------------------------------------

    def _source(self, path: Path, node) -> None:
        data = Path(path).read_bytes()
        tree = _PARSER.parse(data)
        if tree.root_node.has_error:
            bad = _first_error(tree.root_node)
            raise ReadError(_line(bad), _construct(bad), f"{path} is not bash that tree-sitter-bash can parse")
        self._block(tree.root_node.children)

    def _block(self, nodes) -> None:
        for node in nodes:
            if node.is_named and node.type not in ("comment", "heredoc_body"):
                self.status = self._statement(node)

    def _statement(self, node) -> Status:
        self.steps += 1
        if self.steps > STEP_LIMIT:
            raise ReadError(_line(node), _construct(node), f"reading the script takes over {STEP_LIMIT} steps")
        if _misparsed(node):
            return self._reparsed(node)
        kind = node.type
        handler = getattr(self, f"_do_{kind}", None)
        if handler is None:
            raise ReadError(_line(node), _construct(node), f"check does not evaluate bash's {kind.replace('_', ' ')}")
        return handler(node)

    def _reparsed(self, node) -> Status:
        """A statement tree-sitter-bash splits at a ``$name`` after ``/$name/`` (its grammar takes
        ``a=$X/$y/$z`` for a command): read again with ``${name}``, which bash expands the same."""
        fixed = _braced(_text(node))
        tree = _PARSER.parse(("\n" * node.start_point[0] + fixed).encode(errors="surrogateescape"))
        statements = [child for child in tree.root_node.named_children if child.type != "comment"]
        if tree.root_node.has_error or any(_misparsed(child) for child in statements):
            raise ReadError(_line(node), _construct(node), "tree-sitter-bash cannot parse this statement")
        for child in statements:
            self.status = self._statement(child)
        return self.status

    def _do_variable_assignment(self, node) -> Status:
        self._assign(node)
        return 0

    def _do_variable_assignments(self, node) -> Status:
        for child in node.named_children:
            self._assign(child)
        return 0

    def _do_function_definition(self, node) -> Status:
        self.functions[_text(node.child_by_field_name("name"))] = node.child_by_field_name("body")
        return 0

    def _do_compound_statement(self, node) -> Status:
        self._block(node.children)
        return self.status

    def _do_subshell(self, node) -> Status:
        saved = (dict(self.variables), set(self.exported), self.cwd, list(self.positional), dict(self.functions))
        try:
            self._block(node.children)
            return self.status
        except _Exit as stop:
            return stop.status
        finally:
            self.variables, self.exported, self.cwd, self.positional, self.functions = saved

    def _do_negated_command(self, node) -> Status:
        status = self._statement(node.named_children[-1])
        return None if status is None else int(status == 0)

    def _do_list(self, node) -> Status:
        left, operator, right = node.children[0], node.children[1].type, node.children[2]
        status = self._statement(left)
        if status is None:
            if _inert(right, self.functions):
                return None
            if operator == "&&":
                self.note(left, "succeeds (not run; the command after && is read)")
                status = 0
            else:
                raise ReadError(_line(left), _construct(left), "the exit status of this command decides what runs "
                                "next, and check does not run it")
        if (status == 0) == (operator == "&&"):
            return self._statement(right)
        return status

    def _do_pipeline(self, node) -> Status:
        saved, status = self._output, None
        self._output = None if saved is None else []  # each part's output feeds the next, not the caller
        try:
            for part in node.named_children:
                status = self._do_subshell_of(part)
        finally:
            self._output = saved
        self.emit(None)  # what the last part prints depends on what it reads
        return status

    def _do_subshell_of(self, node) -> Status:
        saved = (dict(self.variables), set(self.exported), self.cwd, list(self.positional))
        try:
            return self._statement(node)
        except _Exit as stop:
            return stop.status
        finally:
            self.variables, self.exported, self.cwd, self.positional = saved

    def _do_redirected_statement(self, node) -> Status:
        body = node.child_by_field_name("body")
        redirects = [child for child in node.named_children if child is not body]
        fed = any(r.type in ("heredoc_redirect", "herestring_redirect") for r in redirects)
        to_file = any(_stdout_to_file(r) for r in redirects)
        if body is None:
            return 0
        saved = self._output
        if to_file and saved is not None:
            self._output = []
        self._stdin_fed = fed
        try:
            return self._statement(body)
        finally:
            self._stdin_fed = False
            self._output = saved

    _stdin_fed = False

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
                status = self._statement(statement)
            if status is None:
                rest = [n for _, b in branches[index:] for n in b]
                rest += [n for t, _ in branches[index + 1:] for n in t or []]
                if all(_inert(n, self.functions) for n in rest):
                    return None
                raise ReadError(_line(test[0]), _construct(test[0]), "this test decides what the script runs, and "
                                "its value is not known without running something")
            if status == 0:
                self._block(block)
                return self.status
        return 0

    def _do_case_statement(self, node) -> Status:
        value = self._one(node.child_by_field_name("value"))
        items = [child for child in node.named_children if child.type == "case_item"]
        if self.is_unknown(value):
            if all(_inert(item, self.functions) for item in items):
                return None
            raise ReadError(_line(node), _construct(node.child_by_field_name("value")),
                            "this case decides what the script runs, and its value is not known")
        for item in items:
            patterns = [self._one(child, pattern=True) for i, child in enumerate(item.children)
                        if item.field_name_for_child(i) == "value"]
            if any(fnmatch.fnmatchcase(value, _glob(pattern)) for pattern in patterns):
                body = [child for i, child in enumerate(item.children)
                        if child.is_named and item.field_name_for_child(i) not in ("value", "termination")]
                self._block(body)
                return self.status
        return 0

    def _do_for_statement(self, node) -> Status:
        name = _text(node.child_by_field_name("variable"))
        values = [child for i, child in enumerate(node.children) if node.field_name_for_child(i) == "value"]
        words = self._fields(values) if values else list(self.positional)
        body = node.child_by_field_name("body")
        if any(self.is_unknown(word) for word in words) and not _inert(body, self.functions):
            statements = [child for child in body.named_children if child.type != "comment"]
            if statements and all(child.type == "unset_command" for child in statements):
                self.note(node, "unsets variables named by output check does not have; the variables that decide "
                                "what verl loads are assumed not among them")
                return 0
            raise ReadError(_line(node), _construct(node), "the words of this loop are not known")
        self.loops += 1
        try:
            for word in words:
                self._set(name, word, node)
                try:
                    self._block(body.children)
                except _LoopControl as control:
                    if control.kind == "break":
                        break
        finally:
            self.loops -= 1
        return self.status

    def _do_while_statement(self, node) -> Status:
        """``while``/``until`` on tests it knows (an argument-parsing loop), at most ``LOOP_LIMIT`` times."""
        until = node.children[0].type == "until"
        body = next(child for child in node.named_children if child.type == "do_group")
        conditions = [child for child in node.named_children if child.type not in ("do_group", "comment")]
        for _ in range(LOOP_LIMIT):
            status = None
            for condition in conditions:
                status = self._statement(condition)
            if status is None:
                if _inert(node, self.functions):
                    return 0
                raise ReadError(_line(node), _construct(node), "this loop's test is not known without running "
                                "something, and its body changes what the script runs")
            if (status == 0) == until:
                return 0
            self.loops += 1
            try:
                self._block(body.children)
            except _LoopControl as control:
                if control.kind == "break":
                    return 0
            finally:
                self.loops -= 1
        raise ReadError(_line(node), _construct(node), f"this loop does not end within {LOOP_LIMIT} rounds")

    def _do_c_style_for_statement(self, node) -> Status:
        if _inert(node, self.functions):
            return 0
        raise ReadError(_line(node), _construct(node), "check does not evaluate C-style for loops that change "
                        "what the script runs")

    def _do_test_command(self, node) -> Status:
        expression = [child for child in node.named_children]
        if not expression:
            return 1
        truth = self._test(expression[0], double=_text(node).startswith("[["))
        return None if truth is None else int(not truth)

    def _do_declaration_command(self, node) -> Status:
        keyword = node.children[0].type
        export = keyword == "export"
        for child in node.named_children:
            if child.type == "word" and _text(child).startswith(("-", "+")):
                export = export or "x" in _text(child)
                continue
            if child.type == "variable_assignment":
                name = self._assign(child, local=keyword == "local")
            elif child.type == "variable_name":
                name = _text(child)
                if keyword == "local":
                    self._make_local(name)
                    self.variables[name] = ""
            else:
                raise ReadError(_line(child), _construct(child), f"check does not read this {keyword} argument")
            if export:
                self.exported.add(name)
                self.exported_at[name] = _line(child)
        return 0

    def _do_unset_command(self, node) -> Status:
        for child in node.named_children:
            text = self._one(child)
            if text.startswith("-"):
                continue
            self.variables.pop(text, None)
            self.functions.pop(text, None)
            self.exported.discard(text)
            self.exported_at[text] = _line(child)
        return 0

    def _do_command(self, node) -> Status:
        assignments, words = [], []
        for index, child in enumerate(node.children):
            role = node.field_name_for_child(index)
            if child.type == "variable_assignment":
                assignments.append(child)
            elif role in ("name", "argument"):
                words.append(child)
            elif child.type in ("herestring_redirect", "heredoc_redirect"):
                self._stdin_fed = True
        fields = self._fields(words)
        if not fields:
            for child in assignments:
                self._assign(child)
            return 0
        prefix = {_text(a.child_by_field_name("name")): self._one(a.child_by_field_name("value"))
                  if a.child_by_field_name("value") is not None else "" for a in assignments}
        return self.run(fields, node, prefix)

    # --- commands -----------------------------------------------------------------------------

    def run(self, fields: list, node, prefix: Mapping[str, str] = ()) -> Status:
        """A command's fields: a function of the script, a builtin evaluated here, or ``on_command``."""
        name = fields[0]
        if name in self.functions:
            return self._call(name, fields[1:], node)
        builtin = _BUILTINS.get(name)
        if builtin is not None and not self.is_unknown(name):
            return builtin(self, fields, node)
        answer = self.on_command(self, Command(tuple(fields), _line(node), self.environment(prefix),
                                               self._stdin_fed))
        self.emit(answer.output)
        return answer.status

    def emit(self, text: Optional[str]) -> None:
        """Add to the output of the command substitution being read (``None``: not known)."""
        if self._output is not None:
            self._output.append(text)

    def note(self, node, what: str) -> None:
        """Record an assumption about ``node`` (the caller of ``Shell`` prints them)."""
        self.assumptions.append(f"{self.script.name}:{_line(node)}: `{_construct(node)}` {what}")

    def _call(self, name: str, arguments: list, node) -> Status:
        saved = self.positional
        self.positional = list(arguments)
        self._locals.append({})
        try:
            self._statement(self.functions[name])
            return self.status
        except _Return as stop:
            return stop.status
        finally:
            for local, old in self._locals.pop().items():
                if old is None:
                    self.variables.pop(local, None)
                else:
                    self.variables[local] = old
            self.positional = saved

    def substitute(self, node) -> str:
        """The output of ``$(...)``/backticks as the reader knows it, else a marker."""
        saved, self._output = self._output, []
        state = (dict(self.variables), set(self.exported), self.cwd, list(self.positional), self.status)
        try:
            self._block(node.children)
        except _Exit:
            pass
        finally:
            collected, self._output = self._output, saved
            self.variables, self.exported, self.cwd, self.positional, status = state
            self.status = status
        if any(piece is None for piece in collected):
            return self.unknown(node)
        return "".join(collected).rstrip("\n")

    # --- words --------------------------------------------------------------------------------

    def _fields(self, nodes) -> list:
        """The fields of several words, as bash splits them (markers for unknown parts)."""
        found: list = []
        for node in nodes:
            if node.type == "comment":
                continue
            found.extend(_split(self._chunks(node, quoted=False)))
        return found

    def _one(self, node, pattern: bool = False) -> str:
        """A word without splitting (assignment values, case subjects, [[ ]] operands)."""
        if node is None:
            return ""
        return "".join(text for text, _ in _pieces(self._chunks(node, quoted=True, pattern=pattern)))

    def _chunks(self, node, quoted: bool, pattern: bool = False) -> list:
        """(text, splittable) pieces of one word; ``_BREAK`` between the fields of ``"$@"``."""
        kind = node.type
        if kind in ("word", "number", "extglob_pattern", "regex", "special_variable_name", "variable_name"):
            text = _text(node)
            if pattern:
                return [(text, False)]
            if quoted and kind != "word":
                return [(text, False)]
            return [(_unescape(text), False)] if not (text.startswith("~") and not quoted) else \
                [(self._scalar(self.variables.get("HOME", "~")) + _unescape(text[1:]), False)]
        if kind == "raw_string":
            return [(_text(node)[1:-1], False), ("", False)]
        if kind == "ansi_c_string":
            return [(_ansi_c(_text(node)[2:-1]), False), ("", False)]
        if kind in ("string", "translated_string"):
            return self._string(node)
        if kind == "command_name":
            return self._chunks(node.named_children[0], quoted, pattern)
        if kind == "concatenation":
            return [chunk for child in node.children for chunk in self._chunks(child, quoted, pattern)]
        if kind == "simple_expansion":
            return self._value_chunks(self._lookup(node.named_children[-1]), quoted, node)
        if kind == "expansion":
            return self._expansion(node, quoted)
        if kind == "command_substitution":
            return [(self.substitute(node), not quoted)]
        if kind == "arithmetic_expansion":
            return [(self._arithmetic_text(node), not quoted)]
        raise ReadError(_line(node), _construct(node), f"check does not evaluate bash's {kind.replace('_', ' ')}")

    def _string(self, node) -> list:
        data = node.text
        chunks: list = [("", False)]
        position = node.start_byte + 1
        for child in node.children:
            if not child.is_named:
                continue
            if child.start_byte > position:
                gap = data[position - node.start_byte:child.start_byte - node.start_byte].decode(
                    errors="surrogateescape")
                chunks.append((_unescape_double(gap), False))
            if child.type == "string_content":
                chunks.append((_unescape_double(_text(child)), False))
            else:
                chunks.extend(self._chunks(child, quoted=True))
            position = child.end_byte
        if node.end_byte - 1 > position:
            gap = data[position - node.start_byte:node.end_byte - 1 - node.start_byte].decode(errors="surrogateescape")
            chunks.append((_unescape_double(gap), False))
        if len(chunks) == 2 and chunks[1] is _BREAK or _only_all(node):
            chunks = chunks[1:]
        return chunks

    def _value_chunks(self, value, quoted: bool, node) -> list:
        if isinstance(value, _All):
            items = value.items
            if quoted and value.joined:
                return [(" ".join(items), False)]
            chunks: list = []
            for index, item in enumerate(items):
                if index:
                    chunks.append(_BREAK)
                chunks.append((item, not quoted))
            return chunks
        return [(value, not quoted)]

    def _lookup(self, name_node):
        name = _text(name_node)
        if name_node.type == "subscript":
            return self._subscript(name_node)
        if name in ("@", "*"):
            return _All(list(self.positional), joined=name == "*")
        if name == "#":
            return str(len(self.positional))
        if name == "?":
            return self.unknown(name_node, "$?") if self.status is None else str(self.status)
        if name == "0":
            return str(self.script)
        if name.isdigit():
            index = int(name)
            return self.positional[index - 1] if index <= len(self.positional) else ""
        if name in ("$", "!", "RANDOM", "SECONDS", "BASHPID", "PPID", "HOSTNAME", "-"):
            return self.unknown(name_node, f"${name}")
        if name == "PWD":
            return self.cwd
        if name == "BASH_SOURCE":
            return str(self.script)
        return self._scalar(self.variables.get(name, ""))

    def _subscript(self, node):
        name = _text(node.child_by_field_name("name"))
        index_node = node.child_by_field_name("index")
        index = _text(index_node)
        value = [str(self.script)] if name == "BASH_SOURCE" else self.variables.get(name, "")
        items = value if isinstance(value, list) else [value]
        if index in ("@", "*"):
            return _All(list(items), joined=index == "*")
        position = self._arithmetic(index_node) if index_node.type != "number" else int(index)
        if position is None:
            return self.unknown(node)
        return items[position] if -len(items) <= position < len(items) else ""

    def _expansion(self, node, quoted: bool) -> list:
        children = [child for child in node.children if child.type not in ("${", "}")]
        length = bool(children) and children[0].type == "#" and len(children) > 1
        if length:
            children = children[1:]
        if not children or children[0].type not in ("variable_name", "special_variable_name", "subscript"):
            raise ReadError(_line(node), _construct(node), "check does not evaluate this parameter expansion")
        target, rest = children[0], children[1:]
        value = self._lookup(target)
        name = _text(target)
        if length:
            if isinstance(value, _All):
                return [(str(len(value.items)), not quoted)]
            return [(value if self.is_unknown(value) else str(len(value)), not quoted)]
        if not rest:
            return self._value_chunks(value, quoted, node)
        operator = rest[0].type
        operands = rest[1:]
        if isinstance(value, _All) and operator == ":":
            numbers = [self._arithmetic(o) for o in operands if o.type not in (":",)]
            if any(n is None for n in numbers):
                return [(self.unknown(node), not quoted)]
            start = numbers[0]
            items = ([str(self.script)] + value.items)[start:] if name in ("@", "*") else value.items[start:]
            if len(numbers) > 1:
                items = items[:numbers[1]]
            return self._value_chunks(_All(items, value.joined), quoted, node)
        if isinstance(value, _All):
            raise ReadError(_line(node), _construct(node), "check does not evaluate this expansion of a list")
        is_set = self._is_set(target)
        if operator in ("/", "//", "/#", "/%"):
            return [(self._substitution(value, operator, operands), not quoted)]
        word = "".join(t for op in operands if op.is_named for t, _ in _pieces(self._chunks(op, True)))
        if operator in (":-", "-", ":=", "=", ":+", "+", ":?", "?"):
            missing = not is_set or (operator.startswith(":") and value == "")
            if operator.endswith("+"):
                return [(word if not missing else "", not quoted)]
            if not missing:
                return [(value, not quoted)]
            if operator.endswith("?"):
                raise ReadError(_line(node), _construct(node), f"{name} is not set, and the script stops there")
            if operator.endswith("="):
                self._set(name, word, node)
            return [(word, not quoted)]
        if self.is_unknown(value):
            return [(value, not quoted)]
        if operator in ("#", "##", "%", "%%"):
            return [(_trim(value, word, operator), not quoted)]
        if operator in (",,", ",", "^^", "^"):
            changed = {",,": value.lower(), "^^": value.upper(), ",": value[:1].lower() + value[1:],
                       "^": value[:1].upper() + value[1:]}[operator]
            return [(changed, not quoted)]
        if operator == ":":
            numbers = [self._arithmetic(o) for o in operands if o.type != ":"]
            if any(n is None for n in numbers):
                return [(self.unknown(node), not quoted)]
            text = value[numbers[0]:]
            return [(text[:numbers[1]] if len(numbers) > 1 else text, not quoted)]
        raise ReadError(_line(node), _construct(node), "check does not evaluate this parameter expansion")

    def _substitution(self, value: str, operator: str, operands) -> str:
        """``${V/pattern/replacement}`` and its ``//``, ``/#``, ``/%`` forms."""
        if self.is_unknown(value):
            return value
        split = next((i for i, o in enumerate(operands) if o.type == "/" and not o.is_named), len(operands))
        pattern = "".join(t for o in operands[:split] for t, _ in _pieces(self._chunks(o, True, pattern=True)))
        replacement = "".join(t for o in operands[split + 1:] for t, _ in _pieces(self._chunks(o, True)))
        return _replace(value, pattern, replacement, operator)

    def _is_set(self, target) -> bool:
        name = _text(target)
        if target.type == "subscript":
            return bool(self._one(target))
        if name.isdigit():
            return 0 < int(name) <= len(self.positional) or name == "0"
        if name in ("@", "*", "#", "?", "0", "PWD", "BASH_SOURCE"):
            return True
        return name in self.variables

    # --- arithmetic and tests -----------------------------------------------------------------

    def _arithmetic_text(self, node) -> str:
        value = self._arithmetic(node.named_children[0]) if node.named_children else 0
        return self.unknown(node) if value is None else str(value)

    def _arithmetic(self, node) -> Optional[int]:
        kind = node.type
        if kind == "number" or kind == "word":
            text = self._one(node)
            return self._integer(text, node)
        if kind == "variable_name":
            return self._integer(self._scalar(self.variables.get(_text(node), "0")) or "0", node)
        if kind in ("simple_expansion", "expansion", "command_substitution", "string"):
            return self._integer(self._one(node) or "0", node)
        if kind == "parenthesized_expression":
            return self._arithmetic(node.named_children[0])
        if kind == "unary_expression":
            value = self._arithmetic(node.named_children[-1])
            operator = _text(node.children[0])
            if value is None:
                return None
            return {"-": -value, "+": value, "!": int(not value), "~": ~value}.get(operator)
        if kind == "binary_expression":
            left = self._arithmetic(node.child_by_field_name("left"))
            right = self._arithmetic(node.child_by_field_name("right"))
            operator = _text(node.child_by_field_name("operator"))
            if left is None or right is None:
                return None
            if operator in ("/", "%") and right == 0:
                raise ReadError(_line(node), _construct(node), "division by zero")
            operations = {"+": left + right, "-": left - right, "*": left * right, "**": left ** max(right, 0),
                          "<": int(left < right), ">": int(left > right), "<=": int(left <= right),
                          ">=": int(left >= right), "==": int(left == right), "!=": int(left != right),
                          "&&": int(bool(left and right)), "||": int(bool(left or right))}
            if operator == "/":
                return int(left / right)
            if operator == "%":
                return left - right * int(left / right)
            if operator in operations:
                return operations[operator]
        raise ReadError(_line(node), _construct(node), "check does not evaluate this arithmetic")

    def _integer(self, text: str, node) -> Optional[int]:
        if self.is_unknown(text):
            return None
        text = text.strip()
        if re.fullmatch(r"[A-Za-z_]\w*", text):
            return self._integer(self._scalar(self.variables.get(text, "0")) or "0", node)
        try:
            return int(text, 0) if not re.fullmatch(r"0\d+", text) else int(text, 8)
        except ValueError:
            raise ReadError(_line(node), _construct(node), f"{text!r} is not a number bash's arithmetic "
                            "can read") from None

    def _test(self, node, double: bool) -> Optional[bool]:
        kind = node.type
        if kind == "parenthesized_expression":
            return self._test(node.named_children[0], double)
        if kind == "unary_expression":
            operator = _text(node.children[0])
            operand = node.named_children[-1]
            if operator == "!":
                inner = self._test(operand, double)
                return None if inner is None else not inner
            return self.unary(operator, self._one(operand), node)
        if kind == "binary_expression":
            operator = _text(node.child_by_field_name("operator"))
            left_node, right_node = node.child_by_field_name("left"), node.child_by_field_name("right")
            if operator in ("&&", "||", "-a", "-o"):
                left = self._test(left_node, double)
                if left is not None and left == (operator in ("||", "-o")):
                    return left
                right = self._test(right_node, double)
                if left is None or right is None:
                    return None
                return right
            right_pattern = double and right_node.type in ("word", "extglob_pattern", "concatenation")
            return self.binary(self._one(left_node), operator, self._one(right_node, pattern=right_pattern),
                               node, pattern=right_pattern)
        value = self._one(node)
        return None if self.is_unknown(value) else bool(value)

    def unary(self, operator: str, operand: str, node) -> Optional[bool]:
        if self.is_unknown(operand):
            return None
        if operator == "-z":
            return operand == ""
        if operator == "-n":
            return operand != ""
        if operator == "-v":
            return operand in self.variables
        if operator in ("-f", "-d", "-e", "-x", "-r", "-s", "-L", "-h", "-w"):
            path = os.path.join(self.cwd, operand)
            checks = {"-f": os.path.isfile, "-d": os.path.isdir, "-e": os.path.exists, "-L": os.path.islink,
                      "-h": os.path.islink, "-s": lambda p: os.path.isfile(p) and os.path.getsize(p) > 0,
                      "-x": lambda p: os.access(p, os.X_OK), "-r": lambda p: os.access(p, os.R_OK),
                      "-w": lambda p: os.access(p, os.W_OK)}
            found = checks[operator](path)
            self.note(node, f"is {str(found).lower()} on this machine (read, as the run's machine is assumed "
                            "to have the same files)")
            return found
        raise ReadError(_line(node), _construct(node), f"check does not evaluate the test {operator}")

    def binary(self, left: str, operator: str, right: str, node, pattern: bool = False) -> Optional[bool]:
        if self.is_unknown(left) or self.is_unknown(right):
            return None
        if operator in ("=", "=="):
            return fnmatch.fnmatchcase(left, _glob(right)) if pattern else left == right
        if operator == "!=":
            return not fnmatch.fnmatchcase(left, _glob(right)) if pattern else left != right
        if operator == "=~":
            return re.search(right, left) is not None
        if operator in ("<", ">"):
            return left < right if operator == "<" else left > right
        numeric = {"-eq": "==", "-ne": "!=", "-lt": "<", "-le": "<=", "-gt": ">", "-ge": ">="}
        if operator in numeric:
            a, b = self._integer(left, node), self._integer(right, node)
            return eval(f"{a} {numeric[operator]} {b}")  # noqa: S307 (two ints and a fixed operator)
        raise ReadError(_line(node), _construct(node), f"check does not evaluate the test {operator}")

    # --- variables ----------------------------------------------------------------------------

    def _assign(self, node, local: bool = False) -> str:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        if name_node.type == "subscript":
            raise ReadError(_line(node), _construct(node), "check does not evaluate assignments to array elements")
        name = _text(name_node)
        if local:
            self._make_local(name)
        append = any(child.type == "+=" for child in node.children)
        if value_node is not None and value_node.type == "array":
            items = self._fields(value_node.named_children)
            if append:
                old = self.variables.get(name, [])
                items = (old if isinstance(old, list) else [old]) + items
            self.variables[name] = items
        else:
            value = self._one(value_node)
            if append:
                old = self.variables.get(name, "")
                if isinstance(old, list):
                    self.variables[name] = old + [value]
                    return name
                value = old + value
            self._set(name, value, node)
        if name in self.exported:
            self.exported_at[name] = _line(node)
        return name

    def _set(self, name: str, value: str, node) -> None:
        self.variables[name] = value
        if name in self.exported:
            self.exported_at[name] = _line(node)

    def _make_local(self, name: str) -> None:
        if self._locals and name not in self._locals[-1]:
            self._locals[-1][name] = self.variables.get(name)

    @staticmethod
    def _scalar(value) -> str:
        """A variable's value as a word (an array's first element, as ``$a`` gives it)."""
        return (value[0] if value else "") if isinstance(value, list) else value


@dataclass
class _All:
    """``$@``, ``$*``, ``${a[@]}``: several words; ``joined``: ``$*``/``[*]`` (one word when quoted)."""

    items: list
    joined: bool = False


def _only_all(node) -> bool:
    """Whether a double-quoted string is exactly ``"$@"`` or ``"${a[@]}"`` (no empty field of its own)."""
    named = [child for child in node.children if child.is_named]
    if len(named) != 1 or _text(node) not in (f'"{_text(named[0])}"',):
        return False
    text = _text(named[0])
    return text in ("$@", "${@}") or bool(re.fullmatch(r"\$\{\w+\[@\]\}", text)) or text.startswith("${@:")


def _pieces(chunks: list) -> list:
    """A word's pieces read as one string: the fields of ``"$@"`` joined by a space, as bash does."""
    return [(" ", False) if chunk is _BREAK else chunk for chunk in chunks]


def _split(chunks: list) -> list:
    """bash's word splitting of one word's pieces: splittable text splits on IFS whitespace."""
    fields, current, have = [], "", False
    for chunk in chunks:
        if chunk is _BREAK:
            fields.append(current)
            current, have = "", False
            continue
        text, splittable = chunk
        if not splittable:
            current += text
            have = True
            continue
        for character in text:
            if character in _IFS:
                if have or current:
                    fields.append(current)
                current, have = "", False
            else:
                current += character
                have = True
    if have or current:
        fields.append(current)
    return fields


def _unescape(text: str) -> str:
    """An unquoted word's backslashes: ``\\x`` is ``x``; a backslash-newline disappears."""
    return re.sub(r"\\(\n|.)", lambda m: "" if m.group(1) == "\n" else m.group(1), text, flags=re.S)


def _unescape_double(text: str) -> str:
    r"""Backslashes inside double quotes: only before $ ` " \ and newline."""
    return re.sub(r'\\([$`"\\\n])', lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _ansi_c(text: str) -> str:
    return text.encode("latin-1", errors="backslashreplace").decode("unicode_escape")


def _glob(pattern: str) -> str:
    """bash's pattern as fnmatch reads it (``[!x]`` is the same; ``\\x`` quotes x)."""
    return re.sub(r"\\(.)", lambda m: f"[{m.group(1)}]", pattern)


def _trim(value: str, pattern: str, operator: str) -> str:
    matcher = _glob(pattern)
    lengths = range(len(value) + 1) if operator in ("#", "%") else range(len(value), -1, -1)
    for length in lengths:
        if operator.startswith("#") and fnmatch.fnmatchcase(value[:length], matcher):
            return value[length:]
        if operator.startswith("%") and fnmatch.fnmatchcase(value[len(value) - length:], matcher):
            return value[:len(value) - length]
    return value


def _replace(value: str, pattern: str, replacement: str, operator: str) -> str:
    regex = fnmatch.translate(_glob(pattern))[4:-3]  # (?s:...)\Z -> ...
    if operator == "/#":
        return re.sub(f"^(?:{regex})", lambda _: replacement, value, count=1)
    if operator == "/%":
        return re.sub(f"(?:{regex})$", lambda _: replacement, value, count=1)
    return re.sub(regex, lambda _: replacement, value, count=0 if operator == "//" else 1)


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


def _braced(text: str) -> str:
    """``$name`` as ``${name}`` outside single quotes (what bash expands the same)."""
    out, single, double, index = [], False, False, 0
    while index < len(text):
        character = text[index]
        if character == "\\" and not single:
            out.append(text[index:index + 2])
            index += 2
            continue
        if character == "'" and not double:
            single = not single
        elif character == '"' and not single:
            double = not double
        elif character == "$" and not single:
            match = re.match(r"[A-Za-z_]\w*", text[index + 1:])
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


def _stdout_to_file(redirect) -> bool:
    """Whether a redirection sends standard output to a file (``> f``, ``&> f``, not ``2> f``, ``>&2``)."""
    if redirect.type != "file_redirect":
        return False
    text = _text(redirect).strip()
    match = re.match(r"(\d*)(&>>?|>>?|>\||>&)", text)
    if match is None:
        return False
    descriptor, operator = match.groups()
    return descriptor in ("", "1") and not (operator == ">&" and text[match.end():].strip().isdigit())


def _first_error(node):
    if node.type == "ERROR" or node.is_missing:
        return node
    for child in node.children:
        if child.has_error:
            return _first_error(child)
    return node


def _inert(node, functions: Mapping) -> bool:
    """Whether ``node`` changes nothing this reading tracks: no assignment, no state-changing
    builtin, no call of the script's functions, no mention of main_ppo."""
    if node is None:
        return True
    if "main_ppo" in _text(node):
        return False
    if node.type in _STATEFUL_NODES:
        return False
    if node.type == "command_name":
        name = _text(node)
        if name in _STATEFUL_COMMANDS or name in functions or not re.fullmatch(r"[\w./:+-]+", name):
            return False
    return all(_inert(child, functions) for child in node.children)


# --- builtins evaluated here (what bash itself would do, nothing else) ----------------------


def _echo(shell: Shell, fields: list, node) -> Status:
    words, newline = fields[1:], "\n"
    while words and re.fullmatch(r"-[neE]+", words[0]):
        if "n" in words[0]:
            newline = ""
        words = words[1:]
    shell.emit(" ".join(words) + newline)
    return 0


def _printf(shell: Shell, fields: list, node) -> Status:
    if len(fields) == 2 and "%" not in fields[1]:
        shell.emit(fields[1].encode("latin-1", errors="backslashreplace").decode("unicode_escape"))
    elif len(fields) >= 2 and fields[1] in ("%s", "%s\\n", "%s\n"):
        ending = "\n" if fields[1] != "%s" else ""
        shell.emit("".join(word + ending for word in fields[2:]))
    else:
        shell.emit(None)
    return 0


def _status(value: int) -> Callable:
    return lambda shell, fields, node: value


def _cd(shell: Shell, fields: list, node) -> Status:
    targets = [word for word in fields[1:] if word not in ("--", "-P", "-L")]
    target = targets[0] if targets else shell._scalar(shell.variables.get("HOME", "/"))
    if shell.is_unknown(target) or target == "-":
        shell.cwd = shell.unknown(node)
        return None
    shell.cwd = os.path.normpath(os.path.join(shell.cwd, target))
    return 0


def _pwd(shell: Shell, fields: list, node) -> Status:
    shell.emit(shell.cwd + "\n")
    return 0


def _basename(shell: Shell, fields: list, node) -> Status:
    words = [word for word in fields[1:] if word != "--"]
    if not words or any(shell.is_unknown(w) for w in words):
        shell.emit(None)
        return None
    name = os.path.basename(words[0].rstrip("/")) or "/"
    if len(words) > 1 and name.endswith(words[1]) and name != words[1]:
        name = name[: -len(words[1])]
    shell.emit(name + "\n")
    return 0


def _dirname(shell: Shell, fields: list, node) -> Status:
    words = [word for word in fields[1:] if word != "--"]
    if not words or any(shell.is_unknown(w) for w in words):
        shell.emit(None)
        return None
    path = words[0].rstrip("/") or "/"
    shell.emit((os.path.dirname(path) or ".") + "\n")
    return 0


def _shift(shell: Shell, fields: list, node) -> Status:
    count = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 1
    if count > len(shell.positional):
        return 1
    shell.positional = shell.positional[count:]
    return 0


def _set(shell: Shell, fields: list, node) -> Status:
    if "--" in fields:
        shell.positional = fields[fields.index("--") + 1:]
    return 0


def _exit(shell: Shell, fields: list, node) -> Status:
    status = int(fields[1]) if len(fields) > 1 and fields[1].lstrip("-").isdigit() else shell.status
    raise (_Return if fields[0] == "return" else _Exit)(status)


def _loop(shell: Shell, fields: list, node) -> Status:
    if shell.loops:
        raise _LoopControl(fields[0])
    return 0  # bash: only meaningful in a loop


def _eval(shell: Shell, fields: list, node) -> Status:
    """``eval "$(conda shell.bash hook)"`` defines conda's shell functions; any other eval is refused."""
    constructs = [shell.unknowns.get(word, (0, ""))[1] for word in fields[1:]]
    if len(constructs) == 1 and re.fullmatch(r"\$\(\S*conda shell\.\w+ hook\)", constructs[0]):
        shell.note(node, "defines conda's shell functions (not run); a `conda activate` is assumed to give a "
                         "python with the verl and verl-rfpp this check uses")
        return 0
    return _refuse(shell, fields, node)


def _refuse(shell: Shell, fields: list, node) -> Status:
    raise ReadError(_line(node), _construct(node), f"check does not run or read what `{fields[0]}` runs")


def _source(shell: Shell, fields: list, node) -> Status:
    if len(fields) < 2 or shell.is_unknown(fields[1]):
        raise ReadError(_line(node), _construct(node), "the file this sources is not known")
    path = Path(shell.cwd) / fields[1]
    if fields[1].endswith("bin/activate"):
        venv = str(path.parent.parent)
        shell.variables["VIRTUAL_ENV"] = venv
        shell.variables["PATH"] = f"{venv}/bin:{shell._scalar(shell.variables.get('PATH', ''))}"
        shell.exported.update(("VIRTUAL_ENV", "PATH"))
        shell.note(node, f"activates the virtual environment {venv} (not read): its python is assumed to have "
                         "the verl and verl-rfpp that check uses")
        return 0
    if not path.is_file():
        raise ReadError(_line(node), _construct(node), f"{path} is not a file check can read")
    saved = shell.positional
    if len(fields) > 2:
        shell.positional = fields[2:]
    try:
        shell._source(path, node)
    finally:
        shell.positional = saved
    return shell.status


def _exec(shell: Shell, fields: list, node) -> Status:
    if len(fields) > 1:
        status = shell.run(fields[1:], node)
        raise _Exit(status)
    return 0


def _env(shell: Shell, fields: list, node) -> Status:
    words, extra = fields[1:], {}
    while words and (words[0].startswith("-") or "=" in words[0]):
        if "=" in words[0] and not words[0].startswith("-"):
            name, _, value = words[0].partition("=")
            extra[name] = value
        elif words[0] in ("-u", "-C", "-S"):
            raise ReadError(_line(node), _construct(node), f"check does not read env {words[0]}")
        words = words[1:]
    if not words:
        shell.emit(None)
        return 0
    answer = shell.on_command(shell, Command(tuple(words), _line(node), shell.environment(extra), shell._stdin_fed))
    shell.emit(answer.output)
    return answer.status


def _test_builtin(shell: Shell, fields: list, node) -> Status:
    words = fields[1:-1] if fields[0] == "[" else fields[1:]
    negate = bool(words) and words[0] == "!" and len(words) > 1
    if negate:
        words = words[1:]
    if len(words) == 1:
        truth: Optional[bool] = None if shell.is_unknown(words[0]) else bool(words[0])
    elif len(words) == 2:
        truth = shell.unary(words[0], words[1], node)
    elif len(words) == 3:
        truth = shell.binary(words[0], words[1], words[2], node)
    else:
        raise ReadError(_line(node), _construct(node), "check does not evaluate this test")
    if truth is None:
        return None
    return int(not (truth != negate))


def _quiet(shell: Shell, fields: list, node) -> Status:
    return 0


_BUILTINS: dict = {
    "echo": _echo, "printf": _printf, "true": _status(0), ":": _status(0), "false": _status(1), "cd": _cd,
    "pwd": _pwd, "basename": _basename, "dirname": _dirname, "shift": _shift, "set": _set, "exit": _exit,
    "return": _exit, "break": _loop, "continue": _loop, "source": _source, ".": _source, "eval": _eval,
    "exec": _exec, "env": _env, "test": _test_builtin, "[": _test_builtin, "trap": _quiet, "shopt": _quiet,
    "ulimit": _quiet, "umask": _quiet, "hash": _quiet, "wait": _quiet, "alias": _refuse, "let": _refuse,
    "read": _refuse, "mapfile": _refuse, "readarray": _refuse, "pushd": _refuse, "popd": _refuse,
}
