"""``verl-rfpp check SCRIPT`` is bounded (issue 38 item 5; docs/contract.md section 6.5, "Bounds"):
a script that is a device, FIFO or too large, an expansion or number past a bound, a regular
expression Python's engine could backtrack on, a loop or recursion past a step bound, and every
error bash itself reports are each one line, exit 2, never a traceback, before verl is imported
(a stand-in ``verl`` package first on PYTHONPATH writes a witness when imported), in under 2 s of
CPU time and 300 MB of memory (the child's own rusage)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a check process per case

_MEASURE = """
import json, resource, subprocess, sys
resource.setrlimit(resource.RLIMIT_CPU, (60, 60))
status = subprocess.run(sys.argv[2:]).returncode
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
json.dump({"cpu": usage.ru_utime + usage.ru_stime, "maxrss_kb": usage.ru_maxrss}, open(sys.argv[1], "w"))
sys.exit(status)
"""
"""Runs check in a process of its own and writes the CPU time and peak memory of check alone."""
LAUNCH = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=reinforce_plus_plus_baseline"


def _big(path: Path) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(2_500_000_000)  # sparse: no disk used
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _zero(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


def _text(body: str):
    def write(path: Path) -> Path:
        path.write_text(body)
        return path
    return write


def _bytes(body: bytes):
    def write(path: Path) -> Path:
        path.write_bytes(body)
        return path
    return write


def _sourcing(body: bytes):
    def write(path: Path) -> Path:
        (path.parent / "lib.sh").write_bytes(body)
        path.write_text("source ./lib.sh\n")
        return path
    return write


CASES = {
    "a symlink to /dev/zero": (_zero, "not a regular file"),
    "a FIFO": (_fifo, "not a regular file"),
    "a 2.5 GB sparse file": (_big, "over the 1048576"),
    "a 1.2M-word line": (_text(LAUNCH + " a=1" * 1_200_000 + "\n"), "over the 1048576"),
    "a 25,000-word line": (_text(LAUNCH + " a=1" * 25_000 + "\n"), "over 20000 words"),
    "a 12,000-word command": (_text(LAUNCH + " a=1" * 12_000 + "\n"), "over 10000 words"),
    "a backtracking regex": (_text(f"x=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!\n[[ $x =~ ^(a+)+$ ]] && N=1\n{LAUNCH} n=$N\n"),
                             "a repeated group that holds a repetition"),
    "an alternation repeated": (_text(f"x=a\n[[ $x =~ (a|aa)*b ]] && N=1\n{LAUNCH} n=$N\n"), "repeated group"),
    "an endless loop": (_text(f"while true; do :; done\n{LAUNCH}\n"), "does not end within 5000 rounds"),
    "an endless recursion": (_text(f"f() {{ f; }}\nf\n{LAUNCH}\n"), "nest"),
    "a loop over unknown words": (_text(f"X=a\nfor i in $(seq 40); do X=$X$X; done\n{LAUNCH}\n"), "not known"),
    "a doubling value, known": (_text(f"X=a\nfor i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do X=$X$X; "
                                      f"done\n{LAUNCH}\n"), "a value of over 65536 characters"),
    "a deep nesting": (_text("X=" + "$(" * 3000 + "echo" + ")" * 3000 + f"\n{LAUNCH}\n"), "nests too deeply"),
    "an unknown value deciding a run": (_text(f"X=$'\\x'\nprintf -v Y 'a\\x'\n[ $Y = a ] && {LAUNCH}\n"),
                                        "decides what runs"),
    "0b1": (_text(f"{LAUNCH} n=$((0b1))\n"), "is not a number bash's arithmetic reads"),
    "a NUL byte": (_bytes(f"X=1\n{LAUNCH}\x00\n".encode()), None),
    "an undecodable byte in a sourced file": (_sourcing(f"X=\xff\x80\n{LAUNCH} n=$(( X ))\n".encode("latin-1")),
                                              "in arithmetic (bash's syntax error)"),
    "a division by zero": (_text(f"{LAUNCH} n=$((1/0))\n"), "division by zero"),
}


@pytest.fixture
def witness_path(tmp_path):
    """A stand-in ``verl`` package that records being imported."""
    package = tmp_path / "fake" / "verl"
    package.mkdir(parents=True)
    witness = tmp_path / "verl-was-imported"
    (package / "__init__.py").write_text(f"open({str(witness)!r}, 'w').close()\n")
    return tmp_path / "fake", witness


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bound_is_one_line_exit_2_before_verl_within_2_s_and_300_mb(case, tmp_path, witness_path):
    make, expected = CASES[case]
    fake, witness = witness_path
    script = make(tmp_path / "run.sh")
    repository = Path(__file__).resolve().parents[2]
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TMPDIR": str(tmp_path),
                   "PYTHONPATH": os.pathsep.join([str(fake), str(repository)]), "PYTHONIOENCODING": "utf-8"}
    out, err, usage_file = tmp_path / "stdout", tmp_path / "stderr", tmp_path / "usage.json"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        # A small process of our own runs check and reads its rusage: a child forked from a pytest
        # worker holding 500 MB reports that in its ru_maxrss (seen in CI), whatever check used.
        child = subprocess.run([sys.executable, "-c", _MEASURE, str(usage_file), sys.executable, "-m",
                                "verl_rfpp.cli", "check", str(script)], cwd=tmp_path, env=environment,
                               stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, timeout=120)
    usage = json.loads(usage_file.read_text())
    printed, errors = out.read_text(), err.read_text()
    lines = printed.splitlines()
    assert child.returncode == 2, (case, printed, errors)
    assert "Traceback" not in printed + errors
    assert len(lines) == 1 and lines[0].startswith("verl-rfpp check: "), printed
    if expected:
        assert expected in lines[0], lines[0]
    assert not witness.exists(), "check imported verl before refusing"
    assert usage["cpu"] < 2.0, f"{case}: {usage['cpu']:.2f} s of CPU"
    assert usage["maxrss_kb"] < 300 * 1024, f"{case}: {usage['maxrss_kb']} KB"
