"""bash's integer arithmetic without a shell (docs/contract.md section 6.5): 64-bit signed
integers that wrap around as bash's do, its number syntax (``0x1F``, ``017``, ``2#101``,
``64#@_``), its operators, and ``test``'s stricter decimal integers. Each function computes what
bash 5 computes or raises ``words.Unsupported`` (bash's own errors among them)."""

from __future__ import annotations

import re
from typing import Optional

from verl_rfpp.tools.reader.words import Unsupported

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
