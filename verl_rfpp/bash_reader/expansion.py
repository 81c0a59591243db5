"""Words to fields as bash expands them (docs/contract.md section 6.5): quoting, tilde, ``$name``
and ``$N``, double-quoted strings, word splitting on ``IFS``, and globs (refused where a file
would match); ``${...}`` itself is in ``parameters``."""

from __future__ import annotations

import os
import re

from verl_rfpp.bash_reader import parse, words
from verl_rfpp.bash_reader.parse import text
from verl_rfpp.bash_reader.state import Several, scalar
from verl_rfpp.bash_reader.syntax import gap_between, gap_parts
from verl_rfpp.bash_reader.words import BREAK, Piece

MAX_FIELDS = 10000  # fields of one command or list


class Expansion:
    """Words to fields: ``fields`` (a command's words), ``one_word`` (one word), ``pieces`` (quoted pieces)."""

    def fields(self, nodes, arguments: bool = False) -> list:
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
                pieces += self.pieces(node, quoted=False, assignment=assignment, start=index == 0)
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
            gap = gap_between(previous, node) if previous is not None else None
            parts = None if gap is None else gap_parts(gap)
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

    def one_word(self, node, pattern: bool = False, assignment: bool = False) -> str:
        """A word without splitting (assignment values, case subjects, [[ ]] operands)."""
        if node is None:
            return ""
        pieces = self.pieces(node, quoted=True, pattern=pattern, assignment=assignment)
        return words.as_bytes("".join(" " if piece is BREAK else piece.text for piece in pieces))

    def pieces(self, node, quoted: bool, pattern: bool = False, assignment: bool = False,
                start: bool = True) -> list:
        """The pieces of one word (``BREAK`` between the fields of ``"$@"``); ``quoted``: no word
        splitting (inside [[ ]], assignments, case); ``pattern``: backslashes kept for the pattern."""
        kind = node.type
        if kind == "regex" and re.search(r"[$`'\"]", text(node)):
            return self.pieces(self._as_word(node), quoted, pattern, assignment, start)
        if kind in ("word", "number", "extglob_pattern", "regex", "special_variable_name", "variable_name"):
            written = text(node)
            if pattern:
                return [Piece(self.tilde(written, node, False) if start else written, False, True)]
            if assignment == "word" and start:
                name = re.match(r"[A-Za-z_]\w*=", written)
                written = name.group(0) + self.tilde(written[name.end():], node, True, True) if name else written
            elif start or assignment:
                written = self.tilde(written, node, bool(assignment), start)
            return [Piece(words.unescape_unquoted(written), False, True)]
        if kind == "raw_string":
            return [Piece(text(node)[1:-1], False, False)]
        if kind == "ansi_c_string":
            return [Piece(words.ansi_c(text(node)[2:-1]), False, False)]
        if kind in ("string", "translated_string"):
            return self.string_pieces(node)
        if kind == "command_name":
            return self.pieces(node.named_children[0], quoted, pattern, assignment, start)
        if kind == "concatenation":
            found = []
            first = text(node.children[0])
            if start and first.startswith("~") and not re.search("[/:]" if assignment else "/", first):
                start = False  # the tilde-prefix runs into the next part (~$X, ~"/x"): bash keeps it as written
            for index, child in enumerate(node.children):
                if index:
                    found.extend(self._joined_gap(node.children[index - 1], child))
                found.extend(self.pieces(child, quoted, pattern, assignment, start and index == 0))
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
        gap = gap_between(before, after)
        if not gap:
            return []
        parts = gap_parts(gap)
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
                first = self.lookup_parameter(digit)
                return [Piece(first + text(name)[1:], not quoted, not quoted)]
            return self.value_pieces(self.lookup(name, strict=True), quoted, node)
        if kind == "expansion":
            return self.parameter_expansion(node, quoted)
        if kind == "command_substitution":
            return [Piece(self.substitute(node), not quoted, not quoted)]
        return [Piece(self.arithmetic_text(node), not quoted, not quoted)]

    def lookup_parameter(self, number: str, strict: bool = True) -> str:
        """``$0``, ``$1``...: the script as invoked, or a positional parameter (unset: ``set -u`` applies)."""
        if number == "0":
            return self.invoked_as
        index = int(number)
        return self.positional[index - 1] if index <= len(self.positional) else self.unset_value(number, strict)

    def tilde(self, written: str, node, assignment: bool, start: bool = True) -> str:
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

    def string_pieces(self, node) -> list:
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
                found = self.pieces(child, quoted=True)
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

    def value_pieces(self, value, quoted: bool, node) -> list:
        if isinstance(value, Several):
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


def _only_all(node) -> bool:
    """Whether a double-quoted string is exactly ``"$@"`` or ``"${a[@]}"``, or a slice of them
    (``"${a[@]:1}"``: no empty field of its own; ``"${@:-}"`` is not one)."""
    named = [child for child in node.children if child.is_named]
    if len(named) != 1 or text(node) not in (f'"{text(named[0])}"',):
        return False
    written = text(named[0])
    return written in ("$@", "${@}") or bool(re.fullmatch(r"\$\{(\w+\[@\]|@)(:(?![-=+?]).*)?\}", written, re.S))


def _leading_blanks(node) -> int:
    """How many bytes of blanks (and backslash-newlines) ``node``'s range holds before its own text."""
    if node.type == "string_content":
        return 0
    return len(re.match(rb"(?:[ \t\n]|\\\n)*", node.text).group(0))
