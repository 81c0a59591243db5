"""A script's bytes and syntax tree for the reader (docs/contract.md section 6.5): a regular file of
at most ``MAX_SCRIPT_BYTES`` (never a device, FIFO or socket, never read past the bound), parsed by
tree-sitter-bash when it has no NUL byte and at most ``MAX_WORDS`` words; ``ReadError`` (check's
exit 2, one line) for anything else. Also the node helpers the other modules share."""

from __future__ import annotations

import os
import re
import stat

import tree_sitter
import tree_sitter_bash

MAX_SCRIPT_BYTES = 1 << 20
MAX_WORDS = 20000  # blank-separated words in one file (verl's longest example has under 1000)

_PARSER = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


class ReadError(Exception):
    """A construct the reader does not evaluate exactly: ``line`` (1-based), ``construct`` and why."""

    def __init__(self, line: int, construct: str, why: str):
        super().__init__(f"line {line}: {why}: {construct}")
        self.line, self.construct, self.why = line, construct, why


class Unsupported(Exception):
    """A word bash reads in a way the reader does not model (or an error bash reports): ``why``;
    the reading turns it into a ``ReadError`` naming the line."""


def read_bytes(path: str) -> bytes:
    """The bytes of a script or sourced file, bounded (see the module's docstring)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as error:
        raise ReadError(0, str(path), f"it cannot be opened ({error.strerror})") from None
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            raise ReadError(0, str(path), "it is not a regular file (a device, FIFO, socket or directory)")
        if found.st_size > MAX_SCRIPT_BYTES:
            raise ReadError(0, str(path), f"it is {found.st_size} bytes, over the {MAX_SCRIPT_BYTES} a script may be")
        with os.fdopen(os.dup(descriptor), "rb") as handle:
            data = handle.read(MAX_SCRIPT_BYTES + 1)
    finally:
        os.close(descriptor)
    if len(data) > MAX_SCRIPT_BYTES:
        raise ReadError(0, str(path), f"it is over the {MAX_SCRIPT_BYTES} bytes a script may be")
    return data


def parse_script(data: bytes, path: str):
    """The root node of ``data``'s tree; ``ReadError`` where tree-sitter-bash finds an error."""
    if b"\0" in data:
        raise ReadError(data[:data.index(b"\0")].count(b"\n") + 1, str(path), "it holds a NUL byte")
    if data.startswith(b"\xef\xbb\xbf"):
        raise ReadError(1, "a UTF-8 byte-order mark", f"{path} starts with a byte-order mark, which bash reads as part "
                        "of the first command's name; save the file without it")
    if len(data.split(maxsplit=MAX_WORDS)) > MAX_WORDS:
        raise ReadError(0, str(path), f"it has over {MAX_WORDS} words")
    stray = re.search(rb"\\[ \t]+(\n|#)", data)
    if stray:
        raise ReadError(data[:stray.start()].count(b"\n") + 1, "\\ before a blank at the end of a line",
                        "a backslash and a blank end this line (or come before its comment): bash passes the blank as "
                        "a word and runs the next line as a command of its own (tree-sitter-bash reads it "
                        "otherwise); remove the blank or the comment")
    tree = _PARSER.parse(data)
    if tree.root_node.has_error:
        bad = _first_error(tree.root_node)
        raise ReadError(line(bad), construct(bad), f"{path} is not bash that tree-sitter-bash can parse")
    rejected = _rejected(tree.root_node)
    if rejected is not None:
        raise ReadError(line(rejected[0]), construct(rejected[0]), f"{rejected[1]}: bash rejects this, reads it "
                        "otherwise than tree-sitter-bash or runs what check does not read")
    return tree.root_node


_RESERVED = {"{", "}", "for", "do", "done", "then", "fi", "esac", "in", "while", "until", "if", "elif", "else", "case",
             "function", "select", "!", "]]", "coproc"}
_UNARY_TESTS = {f"-{letter}" for letter in "abcdefghkprstuwxzGLNOSovRn"}
_BODIES = {"do_group", "compound_statement", "subshell", "else_clause"}


def _runs_something(node) -> bool:
    """Whether expanding ``node`` (part of a here-document's body) runs a command or assigns."""
    if node.type == "command_substitution":
        return True
    if node.type == "expansion" and any(c.type in ("=", ":=", "?", ":?") for c in node.children):
        return True
    return any(_runs_something(child) for child in node.children)


def _rejected(root):
    """The first node of a shape bash rejects or reads otherwise though tree-sitter-bash parses it
    (a reserved word or brace run as a command, a subshell as an argument, an empty body, a lone
    unary test, a named file descriptor, an ``esac`` taken as an argument), with what it is."""
    stack = [root]
    while stack:
        node = stack.pop()
        kind = node.type
        if kind == "command_name" and text(node) in _RESERVED:
            return node, f"{text(node)} in a command's place"
        if kind == "word" and node.parent.type in ("command", "command_name") and \
                re.search(r"(?<!\\)(?:\\\\)*\n", text(node)):
            return node, "a command joined with the next line"
        if kind == "command" and any(child.type in ("subshell", "compound_statement") for child in node.children):
            return node, "a ( or { in a command's arguments"
        if kind in _BODIES and not text(node).startswith("((") and not any(
                child.is_named and child.type != "comment" for child in node.children):
            return node, "an empty body"
        if kind in ("if_statement", "elif_clause"):
            after_then = False
            for child in node.children:
                if child.type == "then":
                    after_then = True
                    statements = 0
                elif after_then and child.type in ("elif_clause", "else_clause", "fi"):
                    break
                elif after_then and child.is_named and child.type != "comment":
                    statements += 1
            if after_then and not statements:
                return node, "an empty then"
        if kind == "test_command" and text(node).startswith("[[") and len(node.named_children) == 1 and \
                text(node.named_children[0]) in _UNARY_TESTS:
            return node, "a unary test without its operand"
        if kind == "case_statement":
            items = [child for child in node.children if child.type == "case_item"]
            end = node.children[-1]
            last = items[-1].named_children[-1] if items and items[-1].named_children else None
            if last is not None and end.type == "esac" and not re.search(
                    rb"[\n;&]", root.text[last.end_byte:end.start_byte]):
                return node, "esac after a command on its line"
        if kind == "command_substitution" and text(node).startswith("`") and "\\" in text(node):
            return node, "a backslash inside backticks"
        if kind == "heredoc_redirect":
            extra = [c for c in node.named_children if c.type not in ("heredoc_start", "heredoc_body", "heredoc_end")]
            if any(c.type != "file_redirect" or len(c.named_children) > 2 for c in extra):
                return node, "a here-document's line goes on with a pipe or words"
        if kind == "heredoc_body" and any(_runs_something(c) for c in node.children):
            return node, "a here-document whose body runs a command or assigns"
        if kind == "redirected_statement":
            body = node.child_by_field_name("body")
            redirect = next((c for c in node.children if c.type == "file_redirect"), None)
            if body is not None and body.type == "command" and redirect is not None and body.named_children and \
                    body.named_children[-1].end_byte == redirect.start_byte and \
                    re.fullmatch(r"\{[A-Za-z_]\w*\}", text(body.named_children[-1])):
                return node, "a named file descriptor ({name}>)"
        stack.extend(reversed(node.children))
    return None


def _first_error(node):
    while not (node.type == "ERROR" or node.is_missing):
        child = next((c for c in node.children if c.has_error or c.is_missing), None)
        if child is None:
            return node
        node = child
    return node


def text(node) -> str:
    return node.text.decode(errors="surrogateescape")


def line(node) -> int:
    return node.start_point[0] + 1


def printable(value: str) -> str:
    """``value`` safe to print on any terminal and encoding: control characters and bytes that are
    not UTF-8 written as escapes."""
    out = []
    for character in value:
        code = ord(character)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif character.isprintable() or character == " ":
            out.append(character)
        else:
            out.append(repr(character)[1:-1])
    return "".join(out)


def construct(node) -> str:
    """``node``'s text on one line, at most 80 characters, printable."""
    written = printable(" ".join(text(node).split()))
    return written if len(written) <= 80 else written[:77] + "..."
