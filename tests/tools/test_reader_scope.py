"""The reader's scoping, positional parameters, options and unknown statuses (issue 49's classes
"Scope and order", "Positional and options", "A run decided by an unknown status"; docs/contract.md
section 6.5). Each expected value is what /bin/bash 5.2 gives for the same script (the differential
corpus under tests/tools/differential/ has them judged by bash itself); a construct the reader
cannot know must be refused naming its line, never read another way. No process is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_rfpp.cli import scripts

LAUNCH = "python3 -m verl.trainer.main_ppo"


def _read(tmp_path: Path, body: str, arguments=(), files=None) -> scripts.Reading:
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(text)
    path = tmp_path / "run.sh"
    path.write_text(body)
    return scripts.read_script(path, list(arguments), environ={"HOME": "/home/u"}, cwd=str(tmp_path))


def _words(tmp_path: Path, body: str, arguments=(), files=None) -> list:
    (launch,) = _read(tmp_path, body + f'\n{LAUNCH} "$X"\n', arguments, files).launches
    return list(launch.arguments)


@pytest.mark.parametrize("body,expected", [
    # prefix assignments apply left to right; the command's words were expanded before them
    ("f() { X=$R; }\nN=1\nN=8 R=$N f", "8"),
    ("f() { X=\"$N:$R\"; }\nN=1\nN=8 R=$N f\nX=\"$X:$N\"", "8:8:1"),
    # declare -g under a caller's local: the global is set, the local still shadows it in the caller
    ("f() { local N=1; g; X=$N; }\ng() { declare -g N=8; }\nN=2\nf\nX=\"$X:$N\"", "1:8"),
    ("f() { local N=4; g; }\ng() { declare -g N=$N$N; }\nN=1\nf\nX=$N", "44"),
    # unset of a caller's local reveals the variable it shadowed; an assignment then sets that one
    ("f() { local N=1; g; X=$N; }\ng() { unset N; }\nN=8\nf", "8"),
    ("f() { local N=4; g; }\ng() { unset N; N=8; }\nN=1\nf\nX=$N", "8"),
    # unset of a local of the function itself: unset until the function returns
    ("f() { local N=1; unset N; X=${N-unset}; }\nN=8\nf\nX=\"$X:$N\"", "unset:8"),
    # A+=v on an array appends to its element 0
    ("A=(1 2)\nA+=6\nX=\"${A[*]}:${#A[@]}\"", "16 2:2"),
    ("declare -a A\nA+=6\nX=\"${A[*]}:${#A[@]}\"", "6:1"),
    # "${A[@]:1}" of an empty slice is no word; "${@:-}" with no arguments is one empty word
    ("A=(only)\nset -- \"${A[@]:1}\"\nX=$#", "0"),
    ("set -- \"${@:-}\"\nX=$#", "1"),
    # [[ -v N ]] tests positional parameter N
    ("set -- a\n[[ -v 1 ]] && X=one\n[[ -v 2 ]] || X=\"$X no-two\"", "one no-two"),
    ("A=(a b)\n[[ -v A[1] ]] && X=one\n[[ -v A[2] || -v B[0] ]] || X=\"$X none\"", "one none"),
    # bash's own variables are set as bash sets them
    ("X=${BASH_VERSION+set}${PS1+ps1}", "set"),
    ("f() { [[ -v FUNCNAME ]] && X=\"$X in\"; }\n[[ -v FUNCNAME ]] || X=top\nf", "top in"),
])
def test_scoping_and_positional_parameters_as_bash_gives_them(tmp_path, body, expected):
    assert _words(tmp_path, body) == [expected]


def test_bash_source_is_the_stack_of_sources_and_calls(tmp_path):
    library = 'HERE="${BASH_SOURCE[*]}"\nlf() { IN="${BASH_SOURCE[*]}"; }\n'
    body = 'source ./lib.bash\nmf() { lf; }\nmf\nX="$HERE|$IN|$BASH_SOURCE"'
    assert _words(tmp_path, body, files={"lib.bash": library}) == [
        f"./lib.bash {tmp_path / 'run.sh'}|./lib.bash {tmp_path / 'run.sh'} {tmp_path / 'run.sh'}|"
        f"{tmp_path / 'run.sh'}"]


def test_a_prefix_assignment_sees_the_one_before_it_in_the_runs_environment(tmp_path):
    reading = _read(tmp_path, f"P=y\nP=none VERL_USE_EXTERNAL_PLUGINS=$P {LAUNCH}\n{LAUNCH} $P\n")
    first, second = reading.launches
    assert first.environment["VERL_USE_EXTERNAL_PLUGINS"] == "none" and first.environment["P"] == "none"
    assert list(second.arguments) == ["y"] and "P" not in second.environment


@pytest.mark.parametrize("body", [
    # set -eu with ${#X[@]} of an unset X or a scalar: bash 5.2 exits 1, so the run after never starts
    "set -eu\necho ${#X[@]}",
    "X=a\nset -eu\nY=${#X[@]}",
    # a top-level local fails, and set -e ends the shell
    "set -e\nlocal Y=1",
])
def test_what_ends_the_shell_under_set_e_ends_the_reading(tmp_path, body):
    reading = _read(tmp_path, f"{LAUNCH} first\n{body}\n{LAUNCH} second\n")
    assert [list(launch.arguments) for launch in reading.launches] == [["first"]]


@pytest.mark.parametrize("body,line", [
    # a launch an unknown status decides, through words the reader expands, is refused at the test
    ("M=verl.trainer.main_ppo\nif nvidia-smi -L | grep -q H100; then\n  python3 -m $M\nfi", 2),
    ("CMD=(python3 -m verl.trainer.main_ppo)\nnvidia-smi > /dev/null || \"${CMD[@]}\"", 2),
    ("M=verl.trainer.main_ppo\ncase $(nvidia-smi -L) in *H100*) python3 -m $M ;; esac", 2),
    # whether bash sets these depends on how it was started
    (f"{LAUNCH} ${{OLDPWD+x}}", 1),
    # ${#X[@]} under set -u alone: bash abandons the command, which the reader does not model
    (f"set -u\n{LAUNCH} ${{#X[@]}}", 2),
])
def test_what_the_reader_cannot_know_is_refused_at_its_line(tmp_path, body, line):
    with pytest.raises(scripts.ScriptError, match=rf"run\.sh:{line}: check cannot read this exactly"):
        _read(tmp_path, body + "\n")


def test_an_unknown_status_before_and_reads_the_launch_through_a_variable_under_an_assumption(tmp_path):
    reading = _read(tmp_path, "M=verl.trainer.main_ppo\nnvidia-smi > /dev/null && python3 -m $M n=1\n")
    assert [list(launch.arguments) for launch in reading.launches] == [["n=1"]]
    assert any("nvidia-smi > /dev/null` succeeds" in note for note in reading.assumptions)
