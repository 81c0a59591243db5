"""Parameter expansion ``${...}`` (docs/contract.md section 6.5): subscripts, ``${#x}``, the
defaulting operators (``:-``, ``:=``, ``:+``, ``:?``), slices, pattern removal and replacement
(``#``, ``%``, ``/``), case changes, and operand words read as bash reads them inside ``${ }``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Optional

from verl_rfpp.bash_reader import parse, words
from verl_rfpp.bash_reader.parse import ReadError, text
from verl_rfpp.bash_reader.state import Exit, Several, scalar
from verl_rfpp.bash_reader.syntax import in_assignment, in_string, misparsed
from verl_rfpp.bash_reader.variables import BASH_OWN
from verl_rfpp.bash_reader.words import BREAK, Piece

if TYPE_CHECKING:
    from verl_rfpp.bash_reader.shell import Shell

_OPERAND_SPECIAL = " \t;&|<>(){}#"
_OPERAND_MARKS = {character: chr(0xE000 + index) for index, character in enumerate(_OPERAND_SPECIAL)}
_OPERAND_UNMARK = {mark: character for character, mark in _OPERAND_MARKS.items()}


class Parameters:
    """``${...}``: ``parameter_expansion`` reads one parameter expansion node; ``subscript`` an array's."""

    def subscript(self, node, strict: bool = False):
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
            return Several(list(items), joined=index == "*")
        position = self.arithmetic_value(node, *self.inside(node, "["))
        if position is None:
            return self.unknown(node)
        if -len(items) <= position < len(items):
            return items[position]
        return self.unset_value(text(node), strict)

    def parameter_expansion(self, node, quoted: bool) -> list:
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
        value = self.lookup(target, strict=not defaulting)
        name = text(target)
        if length:
            if rest:
                raise self.refuse(node, "check does not evaluate this parameter expansion")
            self._length_unset(target, node)
            if isinstance(value, Several):
                return [Piece(str(len(value.items)), not quoted, not quoted)]
            if self.is_unknown(value):
                return [Piece(self.unknown(node), not quoted, not quoted)]
            return [Piece(str(len(value)), not quoted, not quoted)]
        if not rest:
            return self.value_pieces(value, quoted, node)
        operands = rest[1:]
        written = node.text[rest[0].end_byte - node.start_byte:-1].decode(errors="surrogateescape")
        if defaulting:
            return self._defaulting(node, target, name, value, operator, written, quoted)
        if isinstance(value, Several):
            if operator == ":":
                return self.value_pieces(self._slice_all(node, name, value), quoted, node)
            raise self.refuse(node, "check does not evaluate this expansion of a list")
        if self.is_unknown(value):
            return [Piece(self.unknown(node), not quoted, not quoted)]
        if operator in ("/", "//", "/#", "/%") and not self.is_set(target):
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
        if "errexit" in self.state.options and not self.ignore_errexit:
            self.note(node, f"ends the script: {name} is unbound under set -u (bash 5.2 exits with status 1)")
            raise Exit(1)
        raise self.refuse(node, f"{name} is unbound under set -u, and check does not model what bash then abandons")

    def _defaulting(self, node, target, name: str, value, operator: str, written: str, quoted: bool) -> list:
        """``${V:-w}``, ``${V-w}``, ``${V:=w}``, ``${V=w}``, ``${V:+w}``, ``${V+w}``, ``${V:?w}``,
        ``${V?w}``: the word is expanded only when it is used, as bash does. A list (``$@``, ``$*``,
        ``${a[@]}``) is set when it has an element, null when its elements joined are empty (``$*``'s
        way inside double quotes). Outside double quotes the word's unquoted parts are split (and
        ``~`` at its start expanded); inside them it is read as a double-quoted string."""
        if isinstance(value, Several):
            separator = scalar(self.variables.get("IFS", " "))[:1] if value.joined and in_string(node) else " "
            present = bool(separator.join(value.items) if operator.startswith(":") else value.items)
            if operator.startswith(":") and value.items and not any(value.items) and quoted and not in_string(node):
                raise self.refuse(node, "check does not model this test of empty elements outside quotes (bash "
                                        "reads it one way in arguments and [[ ]], another in assignments and case)")
        else:
            if self.is_unknown(value) and operator.startswith(":"):
                raise self.refuse(node, "whether this value is empty is not known")
            present = self.is_set(target) and not (operator.startswith(":") and value == "")

        def word() -> list:  # an empty word inside double quotes is still a (null) string
            found = self._operand_pieces(node, written, split=not quoted)
            return found or ([Piece("", False, False)] if quoted else [])

        if operator.endswith("+"):
            return word() if present else []
        if present:
            return self.value_pieces(value, quoted, node)
        if operator.endswith("?"):
            self.note(node, f"ends the script: {name} is unset or empty (bash exits with status 1)")
            raise Exit(1)
        found = word()
        if operator.endswith("="):
            if target.type != "variable_name":
                raise self.refuse(node, "check does not model this assignment")
            joined = "".join(p.text for p in found)
            self.check_assignable(name, node)
            self.set_variable(name, joined, node)
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
        if in_string(node) and not pattern:
            if re.search(r'(?<!\\)(\\\\)*"', written) or "$'" in written:
                raise self.refuse(node, "check does not model quotes inside the word of a double-quoted expansion")
            if re.search(r"(?<!\\)(\\\\)*\\\}", written):
                if re.search(r"\$[{(]", written):
                    raise self.refuse(node, "check does not model \\} beside an expansion in this word")
                written = re.sub(r"\\(.)", lambda m: m.group(1) if m.group(1) == "}" else m.group(0), written)
            string = self._reparsed_word(node, f'"{written}"', "string")
            return [Piece(p.text, False, False) for p in self.string_pieces(string) if p is not BREAK]
        marked = _mark_blanks(written)
        if marked is None:
            raise self.refuse(node, "check cannot read the word of this parameter expansion")
        found = []
        argument = self._reparsed_word(node, marked, None)
        parts = argument.children if argument.type == "concatenation" else [argument]
        assignment = in_assignment(node) and not pattern
        for index, part in enumerate(parts):
            if part.type == "word":
                found.extend(_literal_pieces(text(part), split, self._home(node) if tilde else None,
                                             (index == 0, index == len(parts) - 1), assignment))
            else:
                found.extend(p for p in self.pieces(part, quoted=not split, pattern=pattern, start=False)
                             if p is not BREAK)
        return [Piece(p.text, False, p.active) for p in found] if pattern else found

    def _home(self, node) -> Callable[[str], str]:
        """A tilde-prefix (``~``, ``~user``) expanded as ``_tilde`` expands it."""
        return lambda prefix: self.tilde(prefix, node, False)

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
                misparsed(arguments[0]):
            raise self.refuse(node, "check cannot read the word of this parameter expansion as one word")
        return arguments[0]


    def _slice_all(self, node, name: str, value: Several) -> Several:
        numbers = self.bounds(node)
        if any(n is None for n in numbers):
            raise self.refuse(node, "the bounds of this slice are not known")
        items = [self.invoked_as] + value.items if name in ("@", "*") else value.items
        start = numbers[0] if numbers[0] >= 0 else len(items) + numbers[0]
        if start < 0:
            return Several([], value.joined)
        items = items[start:]
        if len(numbers) > 1:
            if numbers[1] < 0:
                raise self.refuse(node, "a negative length in a slice of a list (bash's error)")
            items = items[:numbers[1]]
        return Several(items, value.joined)

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
            return self.bounded(words.replace(value, words.Pattern(pattern), _replacer(replacement, node, self),
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
            numbers = self.bounds(node)
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
