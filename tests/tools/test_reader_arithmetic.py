"""bash's arithmetic in check's reader (verl_rfpp/bash_reader/arithmetic.py; docs/contract.md section
6.5; issue 49, item 2), judged by real bash: generated expressions over every operator, precedence
level, parenthesis, unary operator and number form bash reads, with names holding numbers or
expressions of their own, run by ``/bin/bash`` (many in one process) and by our evaluator, which must
give bash's number or refuse (``Unsupported``), never another number; where bash reports an error,
ours refuses. The same expressions then reach main_ppo through a script the reader reads. A fixed
seed and no example database: every CI run tries the same expressions."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from verl_rfpp.bash_reader import arithmetic
from verl_rfpp.bash_reader.words import Unsupported, printf
from verl_rfpp.cli import scripts

BASH = "/bin/bash"
LAUNCH = "python3 -m verl.trainer.main_ppo"
BATCH = 60  # expressions per bash process
EXAMPLES = 40  # Hypothesis examples per CI run: 2,400 expressions
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ@_"

# --- the generator: bash's arithmetic grammar --------------------------------------------------


def _in_base(value: int, base: int) -> str:
    digits = ""
    while True:
        value, digit = divmod(value, base)
        digits = _DIGITS[digit] + digits
        if not value:
            return digits


_VALUES = st.one_of(st.integers(0, 20), st.integers(0, 1 << 64), st.sampled_from([(1 << 63) - 1, 1 << 63, 1 << 64]))
NUMBERS = st.one_of(
    _VALUES.map(str),
    _VALUES.map(lambda v: f"0x{v:x}"), _VALUES.map(lambda v: f"0X{v:X}"),
    _VALUES.map(lambda v: f"0{v:o}"),
    st.tuples(st.integers(2, 64), st.integers(0, 5000)).map(lambda bv: f"{bv[0]}#{_in_base(bv[1], bv[0])}"),
    st.sampled_from(["08", "0x", "2#2", "65#1", "1#0", "10#", "0b1", "1a", "9z"]),  # bash's errors
)
NAMES = st.sampled_from(["a", "b", "c", "d", "u", "z"])  # u: unset, z: empty, a-d: set per example
BINARY = [",", "||", "&&", "|", "^", "&", "==", "!=", "<", "<=", ">", ">=", "<<", ">>", "+", "-", "*", "/", "%", "**"]
UNARY = ["-", "+", "!", "~"]


def _binary(parts) -> str:
    left, operator, right, tight = parts
    if operator in ("<<", ">>", "**") and tight is None:  # mostly a count or exponent bash computes
        right = right if len(right) < 3 else "3"
    return f"{left}{operator}{right}" if tight else f"{left} {operator} {right}"


def _expressions(leaves):
    return st.recursive(leaves, lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(BINARY), inner, st.sampled_from([False, False, None, True])).map(_binary),
        st.tuples(st.sampled_from(UNARY), inner).map(lambda p: f"{p[0]}{p[1]}"),
        st.tuples(inner, inner, inner).map(lambda p: f"{p[0]} ? {p[1]} : {p[2]}"),
        inner.map(lambda e: f"({e})"),
    ), max_leaves=8)


SMALL = st.integers(0, 12).map(str)
EXPRESSIONS = _expressions(st.one_of(SMALL, SMALL, NUMBERS, NAMES, NAMES))
# a name's value: a number or an expression over the names before it (no cycles)
VALUES = st.one_of(NUMBERS, _expressions(st.one_of(NUMBERS, st.sampled_from(["u", "z"]))), st.just(""))


@st.composite
def environments(draw) -> dict:
    found = {"z": ""}
    for index, name in enumerate("abcd"):
        earlier = st.sampled_from(list("abcd"[:index]) + ["u", "z"])
        found[name] = draw(st.one_of(VALUES, _expressions(st.one_of(NUMBERS, earlier))))
    return found


# --- the oracle and ours --------------------------------------------------------------------------

def _bash(environment: dict, expressions: list) -> list:
    """bash's value of each expression (a string), or ``None`` where bash reports an error."""
    lines = [f"{name}={shlex.quote(value)}" for name, value in environment.items()]
    lines += [f'( echo "@@$(( {expression} ))" ) 2>/dev/null || echo @@error' for expression in expressions]
    done = subprocess.run([BASH, "--norc", "--noprofile", "-c", "\n".join(lines)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}, timeout=60)
    found = done.stdout.splitlines()
    assert len(found) == len(expressions) and all(line.startswith("@@") for line in found), done
    return [None if line == "@@error" else line[2:] for line in found]


def _ours(environment: dict, expression: str):
    """Our value as a string; ``None`` where we refuse."""
    try:
        value = arithmetic.evaluate(expression, lambda name: environment.get(name, ""))
    except Unsupported:
        return None
    assert value is not None, "every value is known here"
    return str(value)


def _judge(environment: dict, expressions: list) -> list:
    """The expressions we computed (bash's value and ours equal); fails on any other number."""
    computed = []
    for expression, theirs in zip(expressions, _bash(environment, expressions), strict=True):
        ours = _ours(environment, expression)
        assert ours is None or ours == theirs, (
            f"$(( {expression} )) with {environment}: bash gives {theirs or 'an error'}, ours {ours}")
        if ours is not None:
            computed.append((expression, ours))
    return computed


def _reader_value(tmp_path: Path, environment: dict, expression: str):
    """What the reader passes to main_ppo for ``x=$(( EXPRESSION ))``; ``None`` where it refuses
    (tree-sitter-bash cannot parse the line, or our evaluator refuses)."""
    body = "".join(f"{name}={shlex.quote(value)}\n" for name, value in environment.items())
    path = tmp_path / "run.sh"
    path.write_text(f'#!/usr/bin/env bash\n{body}{LAUNCH} "x=$(( {expression} ))"\n')
    try:
        (launch,) = scripts.read_script(path, [], environ={"HOME": "/home/u"}, cwd=str(tmp_path)).launches
    except scripts.ScriptError:
        return None
    (argument,) = launch.arguments
    return argument.removeprefix("x=")


# --- the classes of issue 49, each a permanent example ---------------------------------------------

ISSUE_49 = [  # tree-sitter-bash's precedence gave another number for each
    "-1 + 9", "1 ? 2 : 0 ? 3 : 4", "0 ? 2 : 0 ? 3 : 4", "2**3**2", "-2**2", "!a + 1", "~a + 1", "- a * 2",
    "1 , 2 ? 3 : 4", "0 && 1/0", "1 || 1/0", "0 && 2**-1", "1 ? 2 : 1/0", "b * 3", "2 ** -1 ** 2",
]


@pytest.mark.slow  # starts bash
@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@example(environment={"a": "3", "b": "1+2", "c": "", "d": "0x10", "z": ""}, expressions=ISSUE_49)
@given(environment=environments(), expressions=st.lists(EXPRESSIONS, min_size=BATCH, max_size=BATCH))
def test_arithmetic_is_bashs_or_refused(tmp_path_factory, environment, expressions):
    """Each expression as bash evaluates it, by our evaluator and through a script check's reader
    reads (the expression after ``$((`` in a main_ppo override): bash's number or a refusal."""
    computed = _judge(environment, expressions)
    assert len(computed) * 3 >= len(expressions) * 2, "most expressions bash computes, ours computes too"
    tmp_path = tmp_path_factory.mktemp("arithmetic")
    for expression, value in computed:
        assert _reader_value(tmp_path, environment, expression) in (value, None), expression


@pytest.mark.parametrize("expression,expected", [
    # bash 5.2's own values (bash -c 'echo $(( ... ))'), the classes issue 49 found read wrong
    ("-1 + 9", 8), ("1 ? 2 : 0 ? 3 : 4", 2), ("0 ? 2 : 0 ? 3 : 4", 4), ("2**3**2", 512), ("-2**2", 4),
    ("!N + 1", 1), ("~N + 1", -3), ("1 , 2 ? 3 : 4", 3), ("0 && 1/0", 0), ("1 || 1/0", 1), ("E * 3", 9),
    ("(1 , 0) ? 3 : 4", 4), ("9223372036854775807 + 1", -(1 << 63)), ("2#101 + 0x1F + 017 + 64#@_", 4082),
])
def test_bashs_values_for_the_classes_of_issue_49(expression, expected):
    assert arithmetic.evaluate(expression, lambda name: {"N": "3", "E": "1+2"}.get(name, "")) == expected


@pytest.mark.parametrize("expression", [
    "0 && 2**-1", "1/0", "08", "1 2", "x = 1", "x++", "--x", "A[1]", "(1", "1 ?", "1 ? 2", "10#", "'1'"])
def test_bashs_errors_and_what_assigns_are_refused(expression):
    with pytest.raises(Unsupported):
        arithmetic.evaluate(expression, {"x": "1"}.get)


@pytest.mark.parametrize("expression", ["(" * 1500 + "1" + ")" * 1500, "1" + " + 1" * 1500, "- " * 1500 + "1",
                                        "1 ? " * 1500 + "1" + " : 0" * 1500, "2" + " ** 1" * 1500],
                         ids=["parentheses", "sum", "unary", "conditional", "power"])
def test_an_expression_deeper_than_the_stack_is_refused_not_a_crash(expression):
    with pytest.raises(Unsupported):
        arithmetic.evaluate(expression, lambda name: "")


def test_a_name_not_taken_is_never_read():
    """``&&``, ``||`` and ``?:`` leave the branch not taken unevaluated: a name there is not read."""
    def value_of(name):
        assert name == "a", f"bash does not read {name} here"
        return "0"
    assert arithmetic.evaluate("a && b || 1 ? 2 : c", value_of) == 2


@pytest.mark.parametrize("argument,expected", [
    ("010", "8"), ("0x1F", "31"), ("-0x10", "-16"), (" 7", "7"), ("'A", "65"), ('"a', "97"), ("", "0"), ("+5", "5"),
    ("-9223372036854775808", "-9223372036854775808")])
def test_printf_d_reads_numbers_as_bashs_printf(argument, expected):
    """bash's printf reads %d's argument as C's strtoimax in base 0 (``printf %d 010`` prints 8)."""
    assert printf("%d", [argument]) == expected


@pytest.mark.parametrize("argument", ["08", "0x", "1 ", "abc", "'", "'AB", "9223372036854775808", "1.5", " "])
def test_printf_d_of_what_bash_reports_as_an_error_is_refused(argument):
    with pytest.raises(Unsupported):
        printf("%d", [argument])


@pytest.mark.slow  # starts bash
@settings(max_examples=30, derandomize=True, database=None, deadline=None)
@example(argument="010")
@given(argument=st.one_of(NUMBERS, st.from_regex(r"\A[ \t]?[-+]?(0[xX]?)?[0-9a-fA-F]{0,4}\Z"),
                          st.sampled_from(["'A", '"z', "'", " 1 ", "0x", "-"])))
def test_printf_d_is_bashs_or_refused(argument):
    done = subprocess.run([BASH, "-c", 'printf "@@%d" "$1"', "printf", argument], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}, timeout=60)
    try:
        ours = printf("%d", [argument])
    except Unsupported:
        return
    assert done.returncode == 0 and done.stdout == "@@" + ours, (argument, done, ours)


@pytest.mark.slow  # starts bash
def test_an_arithmetic_result_reaches_main_ppo_as_bash_computes_it(tmp_path):
    """End to end: ``$(( ))`` over names, indices and substring bounds, read by check's reader."""
    body = ('N=3 E="1+2"\nA=(10 20 30 40)\nV=abcdef\n'
            f'{LAUNCH} "n=$(( -1 + 9 ))" "m=$(( E * N ))" "i=${{A[N-1?1:2]}}" "s=${{V:1+1:-1+2}}" '
            '"p=$(( 2**3**2 ))" "q=$(( !N + 1 )),$(( ~N + 1 ))" "r=$(( $E * 3 ))"\n')
    path = tmp_path / "run.sh"
    path.write_text("#!/usr/bin/env bash\n" + body)
    (launch,) = scripts.read_script(path, [], environ={"HOME": "/home/u"}, cwd=str(tmp_path)).launches
    echoed = body.replace(LAUNCH, "printf '%s\\n'")
    done = subprocess.run([BASH, "-c", echoed], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
                          timeout=60, cwd=tmp_path)
    assert list(launch.arguments) == done.stdout.splitlines()
    assert list(launch.arguments)[:2] == ["n=8", "m=9"]


def test_arithmetic_tree_sitter_reads_and_bash_does_not_is_refused(tmp_path):
    """tree-sitter-bash reads ``1 <> 2`` as ``(1 < '') > 2`` (an empty string it invents); bash's
    grammar has no operand after ``<`` (bash: "syntax error: operand expected"): check exits 2
    naming the line."""
    path = tmp_path / "run.sh"
    path.write_text(f'#!/usr/bin/env bash\nN=1\n{LAUNCH} "n=$(( 1 <> 2 ))"\n')
    with pytest.raises(scripts.ScriptError, match=r"run.sh:3: check cannot read this exactly"):
        scripts.read_script(path, [], environ={"HOME": "/home/u"}, cwd=str(tmp_path))
