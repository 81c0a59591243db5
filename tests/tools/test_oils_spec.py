"""benchmarks/oils_spec.py's parts that need neither oils nor a process: oils' case format split
into cases (the code up to the first ``## `` annotation, a ``## STDOUT:`` block held apart), and
the record file its bash prelude writes read back into argvs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "oils_spec.py"
_SPEC = importlib.util.spec_from_file_location("oils_spec", _PATH)
oils_spec = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("oils_spec", oils_spec)  # its dataclasses look their module up
_SPEC.loader.exec_module(oils_spec)

TEXT = """## compare_shells: bash dash
## oils_failures_allowed: 1

# a comment before any case
#### first case
a=1
echo $a
## stdout: 1
## N-I dash status: 2

#### block output, then code-like lines in the block
echo 'x y'
argv.py $x
## STDOUT:
echo not code
['x']
## END
## OK zsh STDOUT:
also not code
## END

# a comment between cases (after the annotations: not code)
#### no annotation at all
echo last

#### code on the annotation line
# a comment
## code: ls foo bar '
## status: 2
"""


def test_cases_are_the_code_before_the_first_annotation():
    cases = oils_spec.split_cases(TEXT, "demo")
    assert [(case.name, case.line) for case in cases] == [
        ("first case", 5), ("block output, then code-like lines in the block", 11), ("no annotation at all", 23),
        ("code on the annotation line", 26)]
    assert cases[0].code == "a=1\necho $a\n"
    assert cases[1].code == "echo 'x y'\nargv.py $x\n"
    assert cases[2].code == "echo last\n"
    assert cases[3].code == "ls foo bar '\n"
    assert {case.file for case in cases} == {"demo"}


def test_text_before_the_first_case_is_no_case():
    assert oils_spec.split_cases("## compare_shells: bash\necho header\n") == []


def test_records_read_back_as_argvs():
    data = b"2\0echo\0a b\0" + b"1\0argv.py\0" + b"3\0printf\0%s\\n\0\0"
    assert oils_spec._records(data) == [("echo", "a b"), ("argv.py",), ("printf", "%s\\n", "")]
    assert oils_spec._records(b"") == []
