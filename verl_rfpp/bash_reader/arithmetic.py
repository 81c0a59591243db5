"""bash's integer arithmetic without a shell (docs/contract.md section 6.5): an expression's text
parsed by bash's own grammar (its expr.c: precedence climbing over bash's levels, ``?:`` and ``**``
right-associative, unary operators binding tighter than ``**`` on its left, ``&&``, ``||`` and
``?:`` leaving the branch not taken unevaluated), 64-bit signed integers that wrap around as
bash's do, its number syntax (``0x1F``, ``017``, ``2#101``, ``64#@_``), names whose values are
themselves expressions, ``test``'s stricter decimal integers and ``printf %d``'s C integers. Each
function computes what bash 5 computes or raises ``parse.Unsupported`` (bash's own errors among
them, assignments and ``++``/``--`` too)."""

from __future__ import annotations

import re
from typing import Callable, Optional

from verl_rfpp.bash_reader.parse import Unsupported

_MOD = 1 << 64
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ@_"


def wrap(value: int) -> int:
    """``value`` as a 64-bit signed integer (two's complement wrap-around)."""
    value %= _MOD
    return value - _MOD if value >= 1 << 63 else value


def integer(text: str) -> int:
    """A number as ``$(( ))`` reads a constant: decimal, ``0x``/``0X`` hex, ``0`` octal,
    ``BASE#DIGITS`` (2-64; below 37 letters of either case are the same digit)."""
    written = text.strip()
    match = re.fullmatch(r"(0[xX])([0-9a-fA-F]*)|(0)([0-7]+)|([1-9][0-9]*|0)|([0-9]+)#([0-9a-zA-Z@_]+)", written)
    if match is None:
        raise Unsupported(f"{written[:20]!r} is not a number bash's arithmetic reads")
    if match.group(1):
        base, digits = 16, match.group(2)
    elif match.group(3):
        base, digits = 8, match.group(4)
    elif match.group(5):
        base, digits = 10, match.group(5)
    else:
        base, digits = int(match.group(6)), match.group(7)
        if not 2 <= base <= 64:
            raise Unsupported(f"{written[:20]!r}: bash's bases are 2 to 64")
    value = 0
    for digit in digits:
        position = _DIGITS.index(digit)
        if base <= 36 and 36 <= position < 62:
            position -= 26
        if position >= base:
            raise Unsupported(f"{written[:20]!r}: value too great for base (bash's error)")
        value = wrap(value * base + position)
    return value


def test_integer(text: str) -> Optional[int]:
    """An operand of ``[ A -eq B ]`` (``test``): optional blanks, sign and decimal digits only;
    ``None`` where bash reports "integer expression expected" (status 2)."""
    match = re.fullmatch(r"[ \t\n]*([-+]?[0-9]+)[ \t\n]*", text)
    if match is None:
        return None
    value = int(match.group(1))
    if not -(1 << 63) <= value < 1 << 63:
        raise Unsupported(f"{text[:20]!r} is out of the 64-bit range test reads")
    return value


def unary(operator: str, value: int) -> int:
    if operator == "-":
        return wrap(-value)
    if operator == "+":
        return value
    if operator == "!":
        return int(not value)
    if operator == "~":
        return wrap(~value)
    raise Unsupported(f"the arithmetic operator {operator}")


def binary(operator: str, left: int, right: int) -> int:
    """``left OPERATOR right`` in 64-bit arithmetic as bash computes it."""
    if operator in ("/", "%"):
        if right == 0:
            raise Unsupported("division by zero (bash's error)")
        if left == -(1 << 63) and right == -1:
            return left if operator == "/" else 0
        quotient = abs(left) // abs(right) * (1 if (left >= 0) == (right >= 0) else -1)
        return quotient if operator == "/" else left - right * quotient
    if operator == "**":
        if right < 0:
            raise Unsupported("a negative exponent (bash's error)")
        return wrap(pow(left, right, _MOD))
    if operator in ("<<", ">>"):
        if not 0 <= right < 64:
            raise Unsupported(f"a shift by {right} (outside 0-63 the result depends on the processor)")
        return wrap(left << right) if operator == "<<" else left >> right
    table = {"+": lambda: left + right, "-": lambda: left - right, "*": lambda: left * right,
             "<": lambda: left < right, ">": lambda: left > right, "<=": lambda: left <= right,
             ">=": lambda: left >= right, "==": lambda: left == right, "!=": lambda: left != right,
             "&": lambda: left & right, "|": lambda: left | right, "^": lambda: left ^ right,
             "&&": lambda: bool(left) and bool(right), "||": lambda: bool(left) or bool(right)}
    if operator not in table:
        raise Unsupported(f"the arithmetic operator {operator}")
    return wrap(int(table[operator]()))


def printf_integer(text: str) -> int:
    """An argument of ``printf %d``/``%i`` as bash reads it (C's ``strtoimax`` in base 0 after
    optional blanks: decimal, ``0x`` hex, ``0`` octal, a sign; ``'C``/``"C``: the character's code);
    bash's "invalid number" and "Result too large" are refused."""
    if text[:1] in ("'", '"'):
        if len(text) == 2 and text[1].isascii():
            return ord(text[1])
        raise Unsupported(f"printf %d of {text[:20]!r} (a character code bash reads by the locale)")
    match = re.fullmatch(r"[ \t\n\v\f\r]*([-+]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", text)
    if match is None:
        if text == "":
            return 0
        raise Unsupported(f"printf %d of {text[:20]!r} (bash's invalid number)")
    value = int(match.group(2), 0 if not re.fullmatch(r"0[0-7]+", match.group(2)) else 8)
    value = -value if match.group(1) == "-" else value
    if not -(1 << 63) <= value < 1 << 63:
        raise Unsupported(f"printf %d of {text[:20]!r} (bash's Result too large)")
    return value


# --- expressions: bash's expr.c --------------------------------------------------------------

MAX_DEPTH = 16  # names whose values name other names, as deep as the reader follows them

_TOKEN = re.compile(r"[ \t\n]*(?:([0-9][0-9A-Za-z#@_]*)|([A-Za-z_][0-9A-Za-z_]*)"
                    r"|(==|!=|<=|>=|<<|>>|&&|\|\||\*\*|[-+*/%<>&|^!~?:,()=\[])|(.))", re.S)
_BINARY = {",": 0, "||": 2, "&&": 3, "|": 4, "^": 5, "&": 6, "==": 7, "!=": 7, "<": 8, "<=": 8, ">": 8,
           ">=": 8, "<<": 9, ">>": 9, "+": 10, "-": 10, "*": 11, "/": 11, "%": 11}
_COND = 1  # ``?:`` sits between ``,`` and ``||`` (bash's assignments, refused, would sit there too)


def _tokens(expression: str) -> list:
    """``(kind, text)`` pairs: ``num``, ``name``, ``op``; bash's readtok on ``expression``."""
    if re.search(r"\+\+|--", expression):
        raise Unsupported("++ and -- in arithmetic (they assign)")
    found = []
    for match in _TOKEN.finditer(expression.rstrip(" \t\n")):
        number, name, operator, other = match.groups()
        if other is not None:
            raise Unsupported(f"the character {other!r} in arithmetic (bash's syntax error)")
        if operator == "=":
            raise Unsupported("an assignment in arithmetic")
        if operator == "[":
            raise Unsupported("an array element in arithmetic")
        found.append(("num", integer(number)) if number is not None
                     else ("name", name) if name is not None else ("op", operator))
    return found


class _Parser:
    """Precedence climbing over bash's levels; the tree is tuples: ``("num", N)``, ``("name", S)``,
    ``("unary", OP, X)``, ``("binary", OP, X, Y)``, ``("cond", C, X, Y)``."""

    def __init__(self, expression: str):
        self.tokens, self.position = _tokens(expression), 0

    def peek(self):
        return self.tokens[self.position] if self.position < len(self.tokens) else ("end", "")

    def take(self, operator: str) -> None:
        if self.peek() != ("op", operator):
            raise Unsupported(f"arithmetic without its {operator} (bash's syntax error)")
        self.position += 1

    def whole(self):
        tree = self.climb(0)
        if self.position < len(self.tokens):
            raise Unsupported(f"{self.tokens[self.position][1]!s} after a complete arithmetic expression "
                              "(bash's syntax error)")
        return tree

    def climb(self, level: int):
        """bash's levels from ``level`` up (``_BINARY``, left-associative, each operator's right side
        one level above it), with ``?:`` at ``_COND``: its condition what was read so far, its middle
        a whole expression, its last part again from ``_COND`` (right-associative)."""
        left = self.unary()
        while True:
            kind, operator = self.peek()
            if kind != "op":
                return left
            if operator == "?" and level <= _COND:
                self.position += 1
                middle = self.climb(0)
                self.take(":")
                left = ("cond", left, middle, self.climb(_COND))
                continue
            rank = _BINARY.get(operator)
            if rank is None or rank < level:
                return left
            self.position += 1
            left = ("binary", operator, left, self.climb(rank + 1))

    def unary(self):
        """bash's exppower over exp1: unary ``! ~ - +`` bind tighter than ``**`` on its left,
        ``**`` is right-associative and its right side starts with unary operators again."""
        base = self.prefixed()
        if self.peek() == ("op", "**"):
            self.position += 1
            return ("binary", "**", base, self.unary())
        return base

    def prefixed(self):
        kind, value = self.peek()
        self.position += 1
        if kind == "op" and value in ("!", "~", "-", "+"):
            return ("unary", value, self.prefixed())
        if kind == "op" and value == "(":
            inner = self.climb(0)
            self.take(")")
            return inner
        if kind in ("num", "name"):
            return (kind, value)
        raise Unsupported("an operand expected in arithmetic (bash's syntax error)")


def parse_expression(expression: str):
    """``expression``'s tree by bash's grammar (``None`` for blank text, which bash reads as 0)."""
    if not expression.strip(" \t\n"):
        return None
    return _Parser(expression).whole()


def evaluate(expression: str, value_of: Callable[[str], Optional[str]]) -> Optional[int]:
    """``$(( expression ))`` as bash computes it, ``expression`` already expanded; ``value_of(NAME)``
    is a variable's value (``""`` when unset; ``None`` when not known), called only for the names
    bash evaluates. ``None``: the value depends on one that is not known. An expression nested
    deeper than Python's stack (bash's own limit is 1024 levels) is refused."""
    try:
        return _evaluate(expression, value_of, 0)
    except RecursionError:
        raise Unsupported("arithmetic nested deeper than check follows") from None


def _evaluate(expression: str, value_of: Callable[[str], Optional[str]], depth: int) -> Optional[int]:
    if depth > MAX_DEPTH:
        raise Unsupported(f"variables that name each other over {MAX_DEPTH} levels deep in arithmetic")
    tree = parse_expression(expression)
    return 0 if tree is None else _Evaluation(value_of, depth).value(tree, False)


class _Evaluation:
    def __init__(self, value_of: Callable[[str], Optional[str]], depth: int):
        self.value_of, self.depth = value_of, depth

    def both(self, tree) -> None:
        """A branch taken or not, unknown which: bash's errors in either way of evaluating it."""
        self.value(tree, True)
        self.value(tree, False)

    def value(self, tree, noeval: bool) -> Optional[int]:
        """``tree``'s value; ``noeval``: bash's evaluation of a branch not taken (names read 0,
        a division by zero divides by 1; a negative exponent is still bash's error)."""
        kind = tree[0]
        if kind == "num":
            return tree[1]
        if kind == "name":
            if noeval:
                return 0
            written = self.value_of(tree[1])
            return None if written is None else _evaluate(written, self.value_of, self.depth + 1)
        if kind == "unary":
            operand = self.value(tree[2], noeval)
            return None if operand is None else unary(tree[1], operand)
        if kind == "cond":
            condition = self.value(tree[1], noeval)
            if condition is None:
                self.both(tree[2])
                self.both(tree[3])
                return None
            taken, other = (tree[2], tree[3]) if condition else (tree[3], tree[2])
            self.value(other, True)
            return self.value(taken, noeval)
        operator, left_tree, right_tree = tree[1:]
        left = self.value(left_tree, noeval)
        if operator in ("&&", "||"):
            if left is None:
                self.both(right_tree)
                return None
            decided = bool(left) == (operator == "||")
            right = self.value(right_tree, noeval or decided)
            if decided:
                return int(operator == "||")
            return None if right is None else int(bool(right))
        right = self.value(right_tree, noeval)
        if operator == ",":
            return right
        if operator == "**" and right is not None and right < 0:
            raise Unsupported("a negative exponent (bash's error)")
        if operator in ("/", "%") and right == 0:
            if not noeval:
                raise Unsupported("division by zero (bash's error)")
            right = 1
        if left is None or right is None:
            return None
        return binary(operator, left, right)
