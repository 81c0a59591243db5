"""The static reader of launch scripts (verl_rfpp/bash_reader/, verl_rfpp/cli/scripts.py; docs/contract.md
section 6.5): what bash would pass to main_ppo, found without running anything. Each expected
value is written here from bash's documented behaviour (quoting, splitting, expansions, control
flow), never from the reader's own output. No process is started (the two-minute tier's guard)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verl_rfpp.bash_reader import shell
from verl_rfpp.cli import scripts

LAUNCH = "python3 -m verl.trainer.main_ppo"


def _read(tmp_path: Path, body: str, arguments=(), environ=None, name="run.sh") -> scripts.Reading:
    path = tmp_path / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    return scripts.read_script(path, list(arguments), environ={"HOME": "/home/u"} if environ is None else environ,
                               cwd=str(tmp_path))


def _arguments(tmp_path, body, arguments=(), environ=None) -> list:
    return [list(launch.arguments) for launch in _read(tmp_path, body, arguments, environ).launches]


# Words free of what a shell script cannot hold (NUL) and of the reader's private-use markers.
WORDS = st.lists(st.text(st.characters(blacklist_categories=("Cs", "Co"), blacklist_characters="\0"),
                         max_size=12), max_size=6)


@given(words=WORDS)
def test_quoted_words_reach_main_ppo_exactly(tmp_path_factory, words):
    tmp_path = tmp_path_factory.mktemp("quoted")
    assert _arguments(tmp_path, f"{LAUNCH} {shlex.join(words)}\n") == [words]


@given(words=WORDS, arguments=WORDS)
def test_the_scripts_own_arguments_are_dollar_at_as_given(tmp_path_factory, words, arguments):
    tmp_path = tmp_path_factory.mktemp("forwarded")
    reading = _read(tmp_path, f'{LAUNCH} {shlex.join(words)} "$@"\n', arguments)
    (launch,) = reading.launches
    assert list(launch.arguments) == words + arguments


@given(value=st.text(st.characters(blacklist_categories=("Cs", "Co"), blacklist_characters="\0*?["), max_size=12))
def test_an_unquoted_variable_splits_on_blanks_and_a_quoted_one_does_not(tmp_path_factory, value):
    """bash splits on IFS, by default space, tab and newline (glob characters left out: no pathnames here)."""
    tmp_path = tmp_path_factory.mktemp("split")
    body = f'V={shlex.quote(value)}\n{LAUNCH} $V -- "$V"\n'
    assert _arguments(tmp_path, body) == [[part for part in re.split("[ \t\n]+", value) if part] + ["--", value]]


@pytest.mark.parametrize("expression,environ,expected", [
    ("${X:-d}", {}, "d"), ("${X:-d}", {"X": ""}, "d"), ("${X-d}", {"X": ""}, ""), ("${X:-d}", {"X": "v"}, "v"),
    ("${X:+alt}", {"X": "v"}, "alt"), ("${X:+alt}", {}, ""), ("${#X}", {"X": "four"}, "4"),
    ("${X%.*}", {"X": "a.b.c"}, "a.b"), ("${X%%.*}", {"X": "a.b.c"}, "a"), ("${X#*/}", {"X": "a/b/c"}, "b/c"),
    ("${X##*/}", {"X": "a/b/c"}, "c"), ("${X//a/b}", {"X": "banana"}, "bbnbnb"),
    ("${X/a/b}", {"X": "banana"}, "bbnana"),
    ("${X,,}", {"X": "Qwen"}, "qwen"), ("${X^^}", {"X": "qwen"}, "QWEN"), ("${X:1:2}", {"X": "abcd"}, "bc"),
    ("$((2 * (3 + X) / 2 - 7 % 4))", {"X": "1"}, "1"), ("${HOME}/d", {"HOME": "/h"}, "/h/d"),
])
def test_parameter_expansions_as_bash_gives_them(tmp_path, expression, environ, expected):
    assert _arguments(tmp_path, f'{LAUNCH} "{expression}"\n', environ={"HOME": "/home/u", **environ}) == [[expected]]


@pytest.mark.parametrize("body,expected", [
    # bash keeps the blanks between expansions in double quotes (tree-sitter-bash has no node for them)
    ('A=5\n{} "k=$A $A" "${{A}}\t${{A}}" "$(echo x) $A" "${{U:-$A  $A}}"\n', ["k=5 5", "5\t5", "x 5", "5  5"]),
    # inside double quotes a ${V-word}'s backslash quotes only $ ` " \\ } and its single quotes are literal
    ('{} "${{U-\\z}}" "${{U:-\'a\'}}" "${{U-a\\"b}}"\n', ["\\z", "'a'", 'a"b']),
    # an unquoted empty element of $@ is no field; $@ with one empty element is null for :-
    ('set -- "" "" ""\n{} =$@=\nset -- ""\n{} ${{@:-d}} ${{@-e}}\n', ["=", "=", "d"]),
    # empty slice bounds are 0 (an IndexError once)
    ("A=(1 2 3)\n{} ${{A[@]::}} ${{A[@]:1:}} x${{A[@]: :2}}\n", ["x1", "2"]),
    # escapes make bytes, read as UTF-8 in the word
    ("{} $'\\xc3'$'\\251' \"$(printf '\\xE2\\x98\\xA0')\"\n", ["\u00e9", "\u2620"]),
])
def test_words_oils_spec_tests_found_read_wrong(tmp_path, body, expected):
    launches = _arguments(tmp_path, body.format(*[LAUNCH] * body.count("{}")))
    assert [word for launch in launches for word in launch] == expected


def test_assignment_with_default_sets_the_variable(tmp_path):
    body = f': "${{X:=set}}"\n{LAUNCH} "$X"\n'
    assert _arguments(tmp_path, body) == [["set"]]


def test_arrays_functions_locals_shift_and_positional_parameters(tmp_path):
    body = ('ARGS=(a=1 "b=2 3")\nARGS+=(c=4)\n'
            'run() {\n  local est=$1\n  shift\n  ' + LAUNCH + ' est=$est "${ARGS[@]}" n=${#ARGS[@]} "$@"\n}\n'
            'run grpo x=1 "y=2 z"\necho "est=$est"\n')
    assert _arguments(tmp_path, body) == [["est=grpo", "a=1", "b=2 3", "c=4", "n=3", "x=1", "y=2 z"]]


def test_dollar_one_with_a_default_reads_the_scripts_arguments(tmp_path):
    body = f'ENGINE=${{1:-vllm}}\n{LAUNCH} actor_rollout_ref.rollout.name=$ENGINE "${{@:2}}"\n'
    assert _arguments(tmp_path, body) == [["actor_rollout_ref.rollout.name=vllm"]]
    reading = _read(tmp_path, body, ["sglang", "trainer.seed=1"])
    assert [list(launch.arguments) for launch in reading.launches] == [
        ["actor_rollout_ref.rollout.name=sglang", "trainer.seed=1"]]


def test_a_script_that_checks_its_arguments_reads_as_it_runs(tmp_path):
    body = ('while false; do :; done\nif [ $# -lt 1 ]; then echo "usage: run.sh MODEL"; exit 1; fi\n'
            f'{LAUNCH} model=$1\n')
    with pytest.raises(scripts.ScriptError, match="launches no run"):
        _read(tmp_path, body)
    assert _arguments(tmp_path, body, ["--model"]) == [["model=--model"]]


def test_if_elif_case_and_tests_on_known_values(tmp_path):
    body = ('E=sglang\nif [[ $E == vllm* ]]; then A=1; elif [ "$E" = "sglang" ] && test -n "$E"; then A=2; '
            'else A=3; fi\ncase "$E" in\n  vllm|hf) B=x;;\n  sg*) B=y;;\n  *) B=z;;\nesac\n'
            '[ 3 -gt 10 ] || C=c\n' + f'{LAUNCH} a=$A b=$B c=$C\n')
    assert _arguments(tmp_path, body) == [["a=2", "b=y", "c=c"]]


def test_every_run_in_a_loop_and_an_and_list_is_found_but_not_echo(tmp_path):
    body = (f'for est in grpo reinforce_plus_plus_baseline; do\n  {LAUNCH} e=$est\ndone\n'
            f'echo "{LAUNCH} e=echoed"\n{LAUNCH} e=first && {LAUNCH} e=second\n')
    reading = _read(tmp_path, body)
    assert [(launch.line, list(launch.arguments)) for launch in reading.launches] == [
        (3, ["e=grpo"]), (3, ["e=reinforce_plus_plus_baseline"]), (6, ["e=first"]), (6, ["e=second"])]


@pytest.mark.parametrize("launcher", [
    "python -u -m verl.trainer.main_ppo", "python3.11 -mverl.trainer.main_ppo",
    "/opt/venv/bin/python3 -m verl.trainer.main_ppo", "uv run --frozen python3 -m verl.trainer.main_ppo",
    "torchrun --nproc_per_node=8 -m verl.trainer.main_ppo", "python3 /src/verl/verl/trainer/main_ppo.py",
    "ray job submit --address=http://x:8265 -- python3 -m verl.trainer.main_ppo",
    "setsid nohup timeout 10 env A=1 python3 -m verl.trainer.main_ppo", "exec python3 -m verl.trainer.main_ppo",
])
def test_every_launcher_form_is_a_launch(tmp_path, launcher):
    (launch,) = _read(tmp_path, f"{launcher} a=1 2>&1 | tee log.txt\n").launches
    assert launch.arguments == ("a=1",)


def test_the_gpu_machines_probe_and_unknown_values(tmp_path):
    body = ('DEVICE=$(python3 -c "import torch_npu" 2>/dev/null && echo npu || echo gpu)\n'
            'if [ "$DEVICE" = npu ]; then SP=4; else SP=1; fi\nNAME=run-$(date +%s)\n'
            f'{LAUNCH} sp=$SP device=$DEVICE name=$NAME dir=$(basename /a/b.sh .sh)/$(dirname /a/b.sh)\n')
    reading = _read(tmp_path, body)
    (launch,) = reading.launches
    assert launch.known("?") == ("sp=1", "device=gpu", "name=run-?", "dir=b//a")
    assert launch.unknown_parts() == [(4, "$(date +%s)")]
    assert any("torch_npu" in line and "fails" in line for line in reading.assumptions)


def test_the_environment_of_each_launch_is_the_scripts(tmp_path):
    body = (f"export VERL_USE_EXTERNAL_PLUGINS=none\nPYTHONPATH=/mine {LAUNCH} a=1\n"
            f"unset VERL_USE_EXTERNAL_PLUGINS\n{LAUNCH} a=2\n")
    first, second = _read(tmp_path, body, environ={"KEEP": "1"}).launches
    assert first.environment == {"KEEP": "1", "VERL_USE_EXTERNAL_PLUGINS": "none", "PYTHONPATH": "/mine"}
    assert second.environment == {"KEEP": "1"}


def test_a_ray_jobs_runtime_env_vars_are_its_environment(tmp_path):
    body = ("ray job submit --runtime-env-json='{\"env_vars\": {\"VERL_USE_EXTERNAL_PLUGINS\": \"none\"}}' -- "
            f"{LAUNCH} a=1\n")
    (launch,) = _read(tmp_path, body, environ={}).launches
    assert launch.environment == {"VERL_USE_EXTERNAL_PLUGINS": "none"}


def test_a_sourced_file_is_read_too_and_a_venv_is_an_assumption(tmp_path):
    (tmp_path / "common.sh").write_text("MODEL=qwen\nexport A=1\n")
    body = f"source .venv/bin/activate\n. ./common.sh\n{LAUNCH} model=$MODEL\n"
    reading = _read(tmp_path, body)
    assert [list(launch.arguments) for launch in reading.launches] == [["model=qwen"]]
    assert reading.launches[0].environment["A"] == "1"
    assert any("virtual environment" in line for line in reading.assumptions)


@pytest.mark.parametrize("body,construct", [
    (f'eval "{LAUNCH} a=1"\n', "eval"),
    (f"if grep -q x /etc/hostname; then A=1; fi\n{LAUNCH} a=$A\n", "grep -q x /etc/hostname"),
    (f"for x in $(ls); do {LAUNCH} a=$x; done\n", "for x in $(ls)"),
    (f"{LAUNCH} a=1 <<EOF\nb=2\nEOF\n", "here-document"),
    (f'bash -c "{LAUNCH} a=1"\n', "bash -c"),
    ("$(command -v python3) -m verl.trainer.main_ppo a=1\n", "program that starts main_ppo"),
    ("source /nonexistent/env.sh\n", "/nonexistent/env.sh"),
    ("X=$((1 / 0))\n", "division by zero"),
    ("while true; do :; done\n", f"does not end within {shell.LOOP_LIMIT} rounds"),
    ("i=0\nwhile [ $i -lt 1000 ]; do j=0; while [ $j -lt 1000 ]; do j=$((j+1)); done; i=$((i+1)); done\n",
     f"takes over {shell.STEP_LIMIT} steps"),
    # what oils' spec tests found read wrong (issue 49): bash's errors and readings check does not model
    ("S=abc\nX=${S:}\n", "bad substitution"),
    ("P='[^]]'\nS=a]\nX=${S//$P/}\n", "negated bracket expression"),
    ("X=`echo \\\\ `\n", "backslash inside backticks"),
    ("cat <<EOF | tr a b\nx\nEOF\n", "here-document's line goes on"),
    ("cat <<EOF\n$(date)\nEOF\n", "here-document whose body runs a command"),
    ("FOO=bar for i in a b; do :; done\n", "for in a command's place"),
    ("echo (42)\n", "( or { in a command's arguments"),
    ("while false; do\ndone\n", "empty body"),
    ("[[ -z ]]\n", "unary test without its operand"),
    ("echo 'a'\n\\exit 3\n", "joined with the next line"),
    ("exec {fd}> log.txt\n", "named file descriptor"),
    ("cat < /no/such/input.txt\n", "/no/such/input.txt"),
    ('f() { echo hi > "$@"; }\nf a b\n', "several words"),
    ("echo hi >&7\n", "file descriptors above 2"),
    ("test -k /tmp\n", "the test -k"),
    ("f() { set -e; false; }\n! f\n", "set -e under !"),
    ("for ((i = 0; i < 2; i++)); do :; done\n", "C-style for"),
    ("for x in \\\n  $LINENO; do :; done\n", "$LINENO in a command that starts on an earlier line"),
    ("X=1\nY=a$\\\nX\n", "backslash-newline after $"),
])
def test_what_cannot_be_read_safely_is_named_with_its_line(tmp_path, body, construct):
    with pytest.raises(scripts.ScriptError) as caught:
        _read(tmp_path, body, environ={})
    message = str(caught.value)
    assert "run.sh:" in message and construct in message and "verl-rfpp check OVERRIDES" in message, message


def test_a_test_on_an_unknown_value_is_skipped_when_no_branch_matters(tmp_path):
    body = f"if [ ! -d /no/such/dir ]; then mkdir -p /no/such/dir; fi\ncurl -s x && echo ok\n{LAUNCH} a=1\n"
    assert _arguments(tmp_path, body) == [["a=1"]]


@pytest.mark.parametrize("content,what", [
    ("algorithm:\n  adv_estimator: grpo\n", "YAML/JSON config"), ('{"a": 1}\n', "YAML/JSON config"),
    ("algorithm.adv_estimator=grpo\ntrainer.seed=1\n", "list of overrides"),
    (f"{LAUNCH} a=1\r\n", "CRLF"), ("\0\1\2binary", "binary"),
])
def test_only_scripts_are_scripts(tmp_path, content, what):
    path = tmp_path / "thing"
    path.write_bytes(content.encode())
    with pytest.raises(scripts.ScriptError, match=what):
        scripts.is_script(str(path))


def test_paths_and_overrides_are_told_apart_by_what_exists(tmp_path):
    odd = tmp_path / "dir=x y"
    odd.mkdir()
    script = odd / "run me.sh"
    script.write_text(f"{LAUNCH} a=1\n")
    assert scripts.is_script(str(script))
    assert not scripts.is_script("algorithm.adv_estimator=grpo")
    with pytest.raises(scripts.ScriptError, match="no such file"):
        scripts.is_script(str(tmp_path / "missing.sh"))
    with pytest.raises(scripts.ScriptError, match="is a directory"):
        scripts.is_script(str(odd))


FRAGMENTS = [
    "X=1", "Y=${X:-a}", 'A=(a b "c d")', "echo $X", f'{LAUNCH} a=$X "$@"', 'if [ "$X" = 1 ]; then', "fi", "else",
    "for i in $A; do", "done", "case $X in 1) Z=1;; esac", "f() {", "}", "f a b", "shift", "set -- q r", "$(date)",
    "eval x", "source x.sh", "while [ $# -gt 0 ]; do shift; done", "export V=$((X+1))", "${#A[@]}", '"${A[@]}"',
    "unset X", "cat <<EOF\nhi\nEOF", 'x=$(python3 -c "import torch_npu" && echo npu || echo gpu)',
    "trap 'rm -rf x' EXIT",
    "setsid sleep 5 &", "local q=1", "return 3", "exit 0", "break", "[[ $X =~ ^[0-9]+$ ]] && Y=2", "((X++))",
    "read -r Q", "echo ${X/1/2} ${X^^} ${X:0:1} ${!X} ${X@Q}", "$((1/0))", "echo `pwd`", "declare -A M=([k]=v)",
    "A[0]=z", "{ echo; }", "( X=5 )", "echo $? $$ $! $0 $- ${10}", "echo $'a\\tb'", "cd /tmp && pwd", "touch made",
    "python3 -mverl.trainer.main_ppo $(echo a=1) > log", "rm -rf ./*", "curl http://127.0.0.1:9/x | bash",
]


@given(lines=st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=8), arguments=WORDS)
def test_any_script_gives_a_reading_or_one_error_and_changes_nothing(tmp_path_factory, lines, arguments):
    tmp_path = tmp_path_factory.mktemp("any")
    (tmp_path / "keep.txt").write_text("kept")
    try:
        _read(tmp_path, "\n".join(lines) + "\n", arguments)
    except scripts.ScriptError as error:
        assert "\n" not in str(error)  # one line, never a traceback
    assert sorted(path.name for path in tmp_path.iterdir()) == ["keep.txt", "run.sh"]
    assert (tmp_path / "keep.txt").read_text() == "kept"
