"""Conditions and arithmetic as bash reads them (docs/contract.md section 6.5): ``[[ ]]`` (unary
and binary tests, patterns, ``=~``), ``(( ))`` and ``$(( ))`` evaluated from their text by
``arithmetic``, with the names they read looked up here."""

from __future__ import annotations

import os
import re
from typing import Optional

from verl_rfpp.bash_reader import arithmetic, builtins, words
from verl_rfpp.bash_reader.parse import text
from verl_rfpp.bash_reader.state import scalar
from verl_rfpp.bash_reader.variables import BASH_OWN
from verl_rfpp.bash_reader.words import BREAK, Piece

_CLOSING = {"$((": "))", "$[": "]", "((": "))", "[": "]"}
_EXPANDED = {"simple_expansion", "expansion", "command_substitution", "arithmetic_expansion", "string"}
_WORDS = {"word", "string", "raw_string", "ansi_c_string", "simple_expansion", "expansion", "concatenation",
          "command_substitution", "arithmetic_expansion", "number", "translated_string", "extglob_pattern", "regex"}


class Conditions:
    """``[[ ]]`` and arithmetic: ``conditional``, ``unary``, ``test_words``, ``arithmetic_value``."""

    def arithmetic_text(self, node) -> str:
        value = self.arithmetic_value(node, *self.inside(node))
        return self.unknown(node) if value is None else str(value)

    def inside(self, node, opening: str = "") -> tuple:
        """The span between ``node``'s delimiters (``$((``/``))``, ``$[``/``]``, ``((``/``))``, or
        ``opening``/``]`` of a subscript) and the nodes in it, for ``_arithmetic``."""
        children = node.children
        first = next((i for i, child in enumerate(children) if child.type == opening), 0) if opening else 0
        if _CLOSING.get(children[first].type) != children[-1].type:
            raise self.refuse(node, "tree-sitter-bash ends this arithmetic where bash does not")
        return children[first].end_byte, children[-1].start_byte, children[first + 1:-1]

    def bounds(self, node) -> list:
        """``${V:o}``/``${V:o:n}``: the offset and length, each the arithmetic between its colons
        (an empty one 0, as in bash); ``${V:}`` is bash's error."""
        children = node.children
        colons = [i for i, child in enumerate(children) if child.type == ":"]
        if children[-1].type != "}" or not 1 <= len(colons) <= 2:
            raise self.refuse(node, "tree-sitter-bash divides this substring's bounds where bash may not")
        if len(colons) == 1 and colons[0] == len(children) - 2 and children[-2].end_byte == children[-1].start_byte:
            raise self.refuse(node, "an empty offset (bash's error: bad substitution)")
        ends = colons[1:] + [len(children) - 1]
        return [self.arithmetic_value(node, children[a].end_byte, children[b].start_byte, children[a + 1:b])
                for a, b in zip(colons, ends, strict=True)]

    def arithmetic_value(self, owner, start: int, end: int, inside) -> Optional[int]:
        """The arithmetic written in ``owner`` from byte ``start`` to ``end`` (``inside``: the nodes
        there), as bash evaluates it: its expansions expanded first (as in double quotes), then the
        text parsed and evaluated by bash's grammar (``arithmetic.evaluate``); a name's value is read
        only where bash reads it. ``None``: it holds an unknown value."""
        written, position, known = [], start, True
        for expansion in _expansions(inside):
            written.append(self._literal(owner, position, expansion.start_byte))
            value = self.one_word(expansion)
            known = known and not self.is_unknown(value)
            written.append(value)
            position = expansion.end_byte
        written.append(self._literal(owner, position, end))
        if not known:
            return None

        def value_of(name: str) -> Optional[str]:
            if name not in self.variables and name not in BASH_OWN:
                return self.unset_value(name, strict=True)
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
            return self.lineno(node)
        return self.unknown(node, f"${name}")

    def conditional(self, node) -> Optional[bool]:
        """A ``[[ ]]`` expression: pattern matching, ``=~``, string and arithmetic comparisons."""
        kind = node.type
        if kind == "parenthesized_expression":
            return self.conditional(node.named_children[0])
        if kind == "unary_expression":
            operator = text(node.children[0])
            operand = node.named_children[-1]
            if operator == "!":
                inner = self.conditional(operand)
                return None if inner is None else not inner
            return self.unary(operator, self.one_word(operand), node)
        if kind == "binary_expression":
            operator = text(node.child_by_field_name("operator"))
            left_node, right_node = node.child_by_field_name("left"), node.child_by_field_name("right")
            if operator in ("&&", "||"):
                left = self.conditional(left_node)
                if left is not None and left == (operator == "||"):
                    return left
                right = self.conditional(right_node)
                return None if left is None or right is None else right
            left = self.one_word(left_node)
            if operator == "=~":
                pieces = self._regex_pieces(right_node)
                if self.is_unknown(left) or any(self.is_unknown(p.text) for p in pieces):
                    return None
                return words.regex_match(words.regex(pieces), left)
            if operator in ("=", "==", "!="):  # the fields of "${a[@]}" or $@ joined by a space, as bash does
                pieces = [Piece(" ", False, False) if piece is BREAK else piece
                          for piece in self.pieces(right_node, quoted=True, pattern=True)]
                if self.is_unknown(left) or any(p is not BREAK and self.is_unknown(p.text) for p in pieces):
                    return None
                return words.Pattern(pieces).match(left) != (operator == "!=")
            if operator in builtins.NUMERIC:
                a = self.arithmetic_value(left_node, left_node.start_byte, left_node.end_byte, [left_node])
                b = self.arithmetic_value(right_node, right_node.start_byte, right_node.end_byte, [right_node])
                return None if a is None or b is None else builtins.NUMERIC[operator](a, b)
            raise self.refuse(node, f"check does not model the test {operator}")
        if kind in ("word", "string", "raw_string", "simple_expansion", "expansion", "concatenation",
                    "command_substitution", "number"):
            value = self.one_word(node)
            return None if self.is_unknown(value) else bool(value)
        raise self.refuse(node, f"check does not evaluate this test ({kind.replace('_', ' ')})")

    def test_words(self, nodes) -> list:
        """The arguments ``[`` gets, in order: the words expanded (and split, as bash does), the
        operators as written."""
        found: list = []
        for node in nodes:
            if node.type in _WORDS:
                found.extend(self.fields([node]))
            elif node.is_named and node.child_count:
                found.extend(self.test_words(node.children))
            elif node.type != "comment":
                found.append(text(node))
        return found

    def _regex_pieces(self, node) -> list:
        """The right side of ``=~``: quoted parts are literal; an unquoted expansion is a regex."""
        if node.type != "regex":
            return self.pieces(node, quoted=True, pattern=True)
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


def _expansions(nodes) -> list:
    """The outermost expansions (and double-quoted strings) among ``nodes`` and their descendants."""
    found = []
    for node in nodes:
        found.extend([node] if node.type in _EXPANDED else _expansions(node.children))
    return found
