"""bash's words without a shell (docs/contract.md section 6.5): backslashes and ANSI-C quoting,
``echo -e`` and ``printf`` escapes, word splitting, glob patterns (``case``, ``[[ == ]]``,
``${V#p}``) and ``[[ =~ ]]``'s extended regular expressions. Each function computes exactly what
bash 5 computes or raises ``Unsupported`` naming what it does not model; none of them can take
time that grows faster than the product of its inputs' lengths (no backtracking regex)."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Sequence

from verl_rfpp.bash_reader.arithmetic import printf_integer
from verl_rfpp.bash_reader.parse import Unsupported  # noqa: F401  (words.Unsupported: the reader's modules raise it)

DEFAULT_IFS = " \t\n"
MAX_PATTERN_SUBJECT = 4096  # characters a pattern or regex is matched against (bounds the time)
MAX_REGEX_QUANTIFIERS = 16


class Piece(NamedTuple):
    """Part of a word after expansion: ``split`` (an unquoted expansion: word splitting applies)
    and ``active`` (unquoted: glob and regex characters in it are operators, not literals)."""

    text: str
    split: bool
    active: bool


BREAK = Piece("", False, False)  # between the fields of "$@" (compared by identity)

_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                   "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
_OCTAL = "01234567"
_HEX = "0123456789abcdefABCDEF"


def _escape(text: str, index: int, octal_after_zero: bool) -> tuple[Optional[str], int]:
    """The escape at ``text[index] == '\\'``: (its character, the index after it); ``None`` for
    ``\\c`` (stop). ``octal_after_zero``: echo's ``\\0nnn`` (else ANSI-C's ``\\nnn``)."""
    if index + 1 >= len(text):
        return "\\", index + 1
    letter = text[index + 1]
    if letter in _SIMPLE_ESCAPES and not (octal_after_zero and letter in "'\"?"):
        return _SIMPLE_ESCAPES[letter], index + 2
    if letter == "c":
        return None, index + 2
    if letter in _OCTAL and (letter == "0" or not octal_after_zero):
        start = index + 2 if octal_after_zero else index + 1
        end = start
        while end < len(text) and end < start + 3 and text[end] in _OCTAL:
            end += 1
        return _byte(int(text[start:end] or "0", 8) & 0xFF), end
    if letter == "x":
        end = index + 2
        while end < len(text) and end < index + 4 and text[end] in _HEX:
            end += 1
        if end == index + 2:
            return "\\x", end
        return _byte(int(text[index + 2:end], 16)), end
    if letter in "uU":
        raise Unsupported(f"\\{letter} escapes (their output depends on the locale)")
    return "\\" + letter, index + 2


def _byte(value: int) -> str:
    """The byte an escape makes: a character below 0x80, else the byte as ``surrogateescape`` holds it."""
    return chr(value) if value < 0x80 else chr(0xDC00 + value)


def as_bytes(text: str) -> str:
    """``text`` read again as UTF-8 bytes: bytes from escapes that spell a character become it
    (``\\xE2\\x98\\xA0`` is one character), as bash's output is those bytes."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")


def ansi_c(body: str) -> str:
    """The value of ``$'body'``: C escapes; the value ends at the first NUL, as bash's does."""
    out, index = [], 0
    while index < len(body):
        if body[index] != "\\":
            out.append(body[index])
            index += 1
            continue
        if body[index + 1:index + 2] == "c":
            raise Unsupported("\\c in $'...' (a control character)")
        character, index = _escape(body, index, octal_after_zero=False)
        out.append(character)
    return as_bytes("".join(out).split("\0", 1)[0])


def echo_escapes(text: str) -> tuple[str, bool]:
    """``echo -e``'s reading of one argument: (output, whether ``\\c`` stopped all output there)."""
    out, index = [], 0
    while index < len(text):
        if text[index] != "\\":
            out.append(text[index])
            index += 1
            continue
        character, index = _escape(text, index, octal_after_zero=True)
        if character is None:
            return as_bytes("".join(out)), True
        out.append(character)
    return as_bytes("".join(out)), False


def printf(format_: str, arguments: Sequence[str]) -> str:
    """``printf FORMAT ARGS...`` for the directives ``%s``, ``%d``, ``%i`` and ``%%`` (no flags or
    widths): the format is reused while arguments remain. ``Unsupported`` for anything else."""
    arguments = list(arguments)
    out: list[str] = []
    while True:
        consumed = _printf_once(format_, arguments, out)
        if not arguments or not consumed:
            return as_bytes("".join(out))


def _printf_once(format_: str, arguments: list, out: list) -> bool:
    index, consumed = 0, False
    while index < len(format_):
        character = format_[index]
        if character == "\\":
            if format_[index + 1:index + 2] == "x" and format_[index + 2:index + 3] not in tuple(_HEX):
                raise Unsupported("printf's \\x without a hex digit (bash reports an error)")
            if format_[index + 1:index + 2] in ("c", "u", "U"):
                raise Unsupported(f"printf's \\{format_[index + 1]} in the format")
            escaped, index = _escape(format_, index, octal_after_zero=False)
            out.append(escaped)
            continue
        if character != "%":
            out.append(character)
            index += 1
            continue
        directive = format_[index + 1:index + 2]
        index += 2
        if directive == "%":
            out.append("%")
        elif directive == "s":
            out.append(arguments.pop(0) if arguments else "")
            consumed = True
        elif directive in ("d", "i"):
            out.append(str(printf_integer(arguments.pop(0) if arguments else "")))
            consumed = True
        else:
            raise Unsupported(f"printf's %{directive} directive")
    return consumed


def unescape_unquoted(text: str) -> str:
    """An unquoted word's backslashes: ``\\x`` is ``x``; a backslash-newline disappears."""
    return re.sub(r"\\(\n|.)", lambda m: "" if m.group(1) == "\n" else m.group(1), text, flags=re.S)


def unescape_double(text: str) -> str:
    r"""Backslashes inside double quotes: only before $ ` " \ and newline."""
    return re.sub(r'\\([$`"\\\n])', lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def split(pieces: Sequence[Piece], ifs: str = DEFAULT_IFS) -> list[str]:
    """bash's word splitting of one word's pieces (POSIX's rules): IFS's blanks (space, tab,
    newline) separate fields and are trimmed, each other IFS character ends a field (an empty one
    between two of them), together with the blanks around it; an empty IFS splits nothing. A
    field empty and unquoted is dropped. The elements of an unquoted ``$@``/``$*`` are joined by
    IFS's first character, then split (so an empty one is a field only where that character is
    not a blank); quoted, or with an empty IFS, each is a field (an unquoted empty one none)."""
    if ifs:
        pieces = [Piece(ifs[0], True, False) if piece is BREAK and index and pieces[index - 1].split else piece
                  for index, piece in enumerate(pieces)]
    fields, current, have, after_blank = [], "", False, False
    for piece in pieces:
        if piece is BREAK:
            if have or current:
                fields.append(current)
            current, have, after_blank = "", False, False
            continue
        if not piece.split or not ifs:
            current += piece.text
            have = have or not piece.split or bool(piece.text)
            after_blank = after_blank and not piece.text and piece.split
            continue
        for character in piece.text:
            if character in ifs and character in DEFAULT_IFS:
                if have or current:
                    fields.append(current)
                    after_blank = True
                current, have = "", False
            elif character in ifs:
                if not after_blank:
                    fields.append(current)
                current, have, after_blank = "", False, False
            else:
                current += character
                have, after_blank = True, False
    if have or current:
        fields.append(current)
    return fields


def may_brace_expand(raw: str) -> bool:
    """Whether bash could brace-expand a word written ``raw`` (``{a,b}``, ``{1..3}`` outside quotes
    and ``${...}``/``$(...)``): the reader does not model brace expansion and refuses such words."""
    visible, index, depth = [], 0, 0
    while index < len(raw):
        character = raw[index]
        if character == "\\":
            visible.append("_")
            index += 2
            continue
        if character in "'\"" and depth == 0:
            end = raw.find(character, index + 1)
            index = len(raw) if end < 0 else end + 1
            visible.append("_")
            continue
        if character == "$" and raw[index + 1:index + 2] in ("{", "("):
            depth += 1
            index += 2
            continue
        if depth and character in "})":
            depth -= 1
            index += 1
            continue
        if not depth:
            visible.append(character)
        index += 1
    return re.search(r"\{[^{}]*(,|\.\.)[^{}]*\}", "".join(visible)) is not None


# --- glob patterns -------------------------------------------------------------------------------

_CLASSES = {
    "alpha": str.isalpha, "digit": lambda c: c in "0123456789", "alnum": str.isalnum, "upper": str.isupper,
    "lower": str.islower, "space": lambda c: c in " \t\n\r\f\v", "blank": lambda c: c in " \t",
    "punct": lambda c: c.isascii() and c.isprintable() and not c.isalnum() and c != " ",
    "xdigit": lambda c: c in _HEX, "word": lambda c: c.isalnum() or c == "_",
    "cntrl": lambda c: ord(c) < 32 or ord(c) == 127, "print": lambda c: c.isascii() and c.isprintable(),
    "graph": lambda c: c.isascii() and c.isprintable() and c != " ",
}


def _ascii_class(name: str):
    test = _CLASSES.get(name)
    if test is None:
        raise Unsupported(f"the character class [:{name}:]")
    return lambda c: c.isascii() and test(c)


def _bracket(text: str, start: int, active: Sequence[bool], glob: bool = True) -> Optional[tuple]:
    """A bracket expression at ``text[start] == '['``: (a test of one character, the index after
    ``]``), or ``None`` when there is no closing ``]`` (then ``[`` is itself). ``glob``: a glob's
    (``!`` negates too, a backslash quotes), else a POSIX regex's (a backslash is itself)."""
    index = start + 1
    negate = index < len(text) and text[index] in ("!^" if glob else "^") and active[index]
    index += negate
    if negate and text[index:index + 1] == "]":
        raise Unsupported("a negated bracket expression starting with ] (bash 5.2 matches it one way in case and "
                          "[[ ]], another in ${V/p/r})")
    tests, first = [], True
    while index < len(text):
        character = text[index]
        if character == "]" and active[index] and not first:
            def member(c, tests=tuple(tests), negate=negate):
                return any(test(c) for test in tests) != negate
            return member, index + 1
        first = False
        if character == "[" and active[index] and text[index + 1:index + 2] == ":":
            end = text.find(":]", index + 2)
            if end < 0:
                return None
            tests.append(_ascii_class(text[index + 2:end]))
            index = end + 2
            continue
        if character == "[" and active[index] and text[index + 1:index + 2] in ("=", "."):
            raise Unsupported("an equivalence class or collating symbol in a bracket expression")
        if character == "\\" and glob and active[index] and index + 1 < len(text):
            index += 1
            character = text[index]
        if text[index + 1:index + 2] == "-" and index + 2 < len(text) and text[index + 2] != "]":
            low, high = character, text[index + 2]
            if not (low.isascii() and high.isascii()):
                raise Unsupported("a range of non-ASCII characters")
            tests.append(lambda c, low=low, high=high: low <= c <= high)
            index += 3
            continue
        tests.append(lambda c, literal=character: c == literal)
        index += 1
    return None


class Pattern:
    """A bash glob pattern (``*``, ``?``, ``[...]`` with POSIX classes, ``\\x``) built from pieces,
    quoted pieces literal; matched without backtracking (linear in the subject per ``*``)."""

    def __init__(self, pieces: Sequence[Piece]):
        text = "".join(piece.text for piece in pieces if piece is not BREAK)
        active = [piece.active for piece in pieces if piece is not BREAK for _ in piece.text]
        if re.search(r"[?*+@!]\(", "".join(c if a else "_" for c, a in zip(text, active, strict=True))):
            raise Unsupported("an extended glob pattern (extglob)")
        self.tokens: list = []
        index = 0
        while index < len(text):
            character = text[index]
            if not active[index]:
                self.tokens.append(("=", character))
            elif character == "\\":
                self.tokens.append(("=", text[index + 1] if index + 1 < len(text) else "\\"))
                index += 1
            elif character == "*":
                if not self.tokens or self.tokens[-1] != ("*",):
                    self.tokens.append(("*",))
            elif character == "?":
                self.tokens.append(("?",))
            elif character == "[":
                found = _bracket(text, index, active)
                if found is None:
                    self.tokens.append(("=", "["))
                else:
                    self.tokens.append(("[", found[0]))
                    index = found[1]
                    continue
            else:
                self.tokens.append(("=", character))
            index += 1

    def _one(self, token, character: str) -> bool:
        return token[0] == "?" or (token[0] == "=" and token[1] == character) or (token[0] == "[" and
                                                                                  token[1](character))

    def match(self, subject: str) -> bool:
        """Whether the whole of ``subject`` matches."""
        if len(subject) > MAX_PATTERN_SUBJECT:
            raise Unsupported(f"matching a pattern against {len(subject)} characters")
        if not self.literal and not (subject.isascii() and "".join(t[1] for t in self.tokens if t[0] == "=").isascii()):
            raise Unsupported("a pattern matched against non-ASCII text (the locale decides)")
        tokens, s, t, star, mark = self.tokens, 0, 0, -1, 0
        while s < len(subject):
            if t < len(tokens) and tokens[t][0] != "*" and self._one(tokens[t], subject[s]):
                s, t = s + 1, t + 1
            elif t < len(tokens) and tokens[t][0] == "*":
                star, mark, t = t, s, t + 1
            elif star >= 0:
                mark += 1
                s, t = mark, star + 1
            else:
                return False
        while t < len(tokens) and tokens[t][0] == "*":
            t += 1
        return t == len(tokens)

    @property
    def literal(self) -> bool:
        return all(token[0] == "=" for token in self.tokens)


def trim(value: str, pattern: Pattern, operator: str) -> str:
    """``${V#p}``, ``${V##p}``, ``${V%p}``, ``${V%%p}``."""
    shortest = operator in ("#", "%")
    lengths = range(len(value) + 1) if shortest else range(len(value), -1, -1)
    for length in lengths:
        if operator.startswith("#") and pattern.match(value[:length]):
            return value[length:]
        if operator.startswith("%") and pattern.match(value[len(value) - length:]):
            return value[:len(value) - length]
    return value


def replace(value: str, pattern: Pattern, replacement, operator: str) -> str:
    """``${V/p/r}``, ``${V//p/r}``, ``${V/#p/r}``, ``${V/%p/r}``: the longest match at the first
    (every) position where one starts; ``replacement``: a string or a function of the matched text
    (bash 5.2's ``&``). An empty pattern changes nothing, but for ``/#`` and ``/%`` (it matches
    the empty string at the start or the end)."""
    make = replacement if callable(replacement) else (lambda matched: replacement)
    if not pattern.tokens and operator not in ("/#", "/%"):
        return value
    if operator == "/#":
        for end in range(len(value), -1, -1):
            if pattern.match(value[:end]):
                return make(value[:end]) + value[end:]
        return value
    if operator == "/%":
        for start in range(len(value) + 1):
            if pattern.match(value[start:]):
                return value[:start] + make(value[start:])
        return value
    out, start = [], 0
    while start <= len(value):
        end = next((e for e in range(len(value), start - 1, -1) if pattern.match(value[start:e])), None)
        if end is None or end == start:
            if start < len(value):
                out.append(value[start])
            start += 1
            continue
        out.append(make(value[start:end]))
        start = end
        if operator != "//":
            out.append(value[start:])
            return "".join(out)
    return "".join(out)


# --- [[ =~ ]] ------------------------------------------------------------------------------------


def regex(pieces: Sequence[Piece]):
    """``[[ s =~ RE ]]``'s POSIX extended regular expression as a Python regex with the same
    matches: literals, ``.``, anchors, bracket expressions, groups, ``|`` and the quantifiers
    ``* + ? {m} {m,} {m,n}`` (quoted pieces literal). Refused: backslash escapes of letters or
    digits (GNU extensions, back-references), a quantifier on a group that holds a quantifier
    or ``|`` (Python's engine could backtrack without end where bash's answers at once)."""
    text = "".join(piece.text for piece in pieces if piece is not BREAK)
    active = [piece.active for piece in pieces if piece is not BREAK for _ in piece.text]
    out: list[str] = []
    groups: list[dict] = [{"quantified": False, "alternation": False}]
    quantifiers, index = 0, 0
    last_group: Optional[dict] = None
    while index < len(text):
        character = text[index]
        if not active[index]:
            out.append(re.escape(character))
            last_group = None
            index += 1
            continue
        if character == "\\":
            following = text[index + 1:index + 2]
            if not following or following.isalnum():
                raise Unsupported(f"the escape \\{following} in a regular expression")
            out.append(re.escape(following))
            last_group = None
            index += 2
            continue
        if character == "[":
            found = _bracket(text, index, active, glob=False)
            if found is None:
                raise Unsupported("an unclosed bracket expression in a regular expression")
            out.append(_python_class(text[index:found[1]], found[0]))
            last_group = None
            index = found[1]
            continue
        if character == "(":
            groups.append({"quantified": False, "alternation": False})
            out.append("(?:")
            index += 1
            continue
        if character == ")":
            if len(groups) == 1:
                raise Unsupported("an unbalanced ) in a regular expression")
            last_group = groups.pop()
            out.append(")")
            index += 1
            continue
        if character == "|":
            groups[-1]["alternation"] = True
            out.append("|")
            last_group = None
            index += 1
            continue
        quantifier = re.match(r"\*|\+|\?|\{(\d+)(,(\d*))?\}", text[index:])
        if character in "*+?{" and quantifier:
            if not out or out[-1] in ("(?:", "|"):
                raise Unsupported("a quantifier with nothing before it in a regular expression")
            if last_group is not None and (last_group["quantified"] or last_group["alternation"]):
                raise Unsupported("a repeated group that holds a repetition or an alternative in a regular "
                                  "expression (Python could backtrack without end)")
            low, high = quantifier.group(1), quantifier.group(3)
            if low is not None and (int(low) > 255 or (high and int(high) > 255) or (high and int(high) < int(low))):
                raise Unsupported("a repetition count over 255 or a range that runs backwards")
            quantifiers += 1
            groups[-1]["quantified"] = True
            out.append(quantifier.group(0))
            if text[index + quantifier.end():index + quantifier.end() + 1] in tuple("*+?{"):
                raise Unsupported("a repeated repetition in a regular expression")
            last_group = None
            index += quantifier.end()
            continue
        if character == "{":
            raise Unsupported("a { that starts no repetition count in a regular expression")
        out.append({"$": r"\Z", "^": r"\A"}.get(character, character if character == "." else re.escape(character)))
        last_group = None
        index += 1
    if len(groups) > 1:
        raise Unsupported("an unbalanced ( in a regular expression")
    if quantifiers > MAX_REGEX_QUANTIFIERS:
        raise Unsupported(f"a regular expression with over {MAX_REGEX_QUANTIFIERS} repetitions")
    return re.compile("".join(out), re.S)


def _python_class(written: str, member) -> str:
    """A bracket expression (ASCII only) as a Python character class of the ASCII characters it
    matches; a negated one matches every other character too."""
    if not written.isascii():
        raise Unsupported("a non-ASCII character in a bracket expression")
    body = "".join(re.escape(chr(code)) for code in range(128) if member(chr(code)))
    if written[1:2] == "^":
        return f"(?:[{body}]|[^\\x00-\\x7f])" if body else "[^\\x00-\\x7f]"
    return f"[{body}]" if body else "(?!)"


def regex_match(compiled, subject: str) -> bool:
    """Whether ``[[ subject =~ RE ]]`` matches (``compiled``: ``regex(...)``)."""
    if not subject.isascii():
        raise Unsupported("a regular expression matched against non-ASCII text (the locale decides)")
    if len(subject) > MAX_PATTERN_SUBJECT:
        raise Unsupported(f"matching a regular expression against {len(subject)} characters")
    return compiled.search(subject) is not None
