"""Questions about tree-sitter-bash's nodes, no state (docs/contract.md section 6.5): the bytes
between two nodes, the statements its grammar misreads, and whether a node is inert (changes
nothing a reading tracks), which decides whether an unknown test may skip it."""

from __future__ import annotations

import os
import re
from typing import Mapping, Optional

from verl_rfpp.bash_reader.parse import text

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


_ARITHMETIC_ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "^=", "|="}


def gap_between(before, after) -> Optional[bytes]:
    """The source between two sibling nodes (``None`` when they are not siblings)."""
    parent = before.parent
    if parent is None or after.parent is None or parent != after.parent:
        return None
    return parent.text[before.end_byte - parent.start_byte:after.start_byte - parent.start_byte]


def gap_parts(gap: bytes) -> Optional[tuple]:
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


def in_string(node) -> bool:
    """Whether ``node`` is inside double quotes."""
    while node is not None and node.type not in ("command", "variable_assignment", "case_statement"):
        if node.type in ("string", "translated_string"):
            return True
        node = node.parent
    return False


def in_assignment(node) -> bool:
    """Whether ``node`` is in an assignment's value, outside double quotes."""
    while node is not None and node.type not in ("command", "string", "translated_string"):
        if node.type == "variable_assignment":
            return True
        node = node.parent
    return False


def misparsed(node) -> bool:
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


def _expands(node) -> bool:
    """Whether a word of ``node`` holds an expansion (its value is known only when read)."""
    if node.type in ("simple_expansion", "expansion", "command_substitution", "arithmetic_expansion",
                     "process_substitution"):
        return True
    return any(_expands(child) for child in node.children)


def inert(node, functions: Mapping) -> bool:
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
    return all(inert(child, functions) for child in node.children)
