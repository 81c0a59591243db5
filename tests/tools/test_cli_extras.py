"""Commands refuse what they cannot use before starting anything: a missing optional extra, a
count below 1, an output directory they cannot write, a Ray address with no cluster behind it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from verl_rfpp.cli import main as cli

BLOCKED_IMPORT = textwrap.dedent("""
    import sys

    class Blocker:  # what an environment without the module looks like to an import
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {blocked!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    from verl_rfpp.cli.main import main
    sys.exit(main({argv!r}))
""")


@pytest.mark.slow
def test_demo_without_the_cpu_extra_names_the_install_command(tmp_path):
    script = BLOCKED_IMPORT.format(blocked={"transfer_queue"}, argv=["demo", "--out", str(tmp_path / "demo")])
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "pip install 'verl-rfpp[cpu]'" in result.stdout and "transfer_queue" in result.stdout
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "demo").exists()  # nothing was started or built


# --- counts and output directories: refused at parse time, one line, exit 2, nothing started ------

@pytest.mark.parametrize("argv,named", [
    (["curves", "--seeds", "0"], "--seeds 0"),
    (["curves", "--steps", "0"], "--steps 0"),
    (["curves", "--steps", "-2"], "--steps -2"),
    (["curves", "--task", "noisy", "--seeds", "-1"], "--seeds -1"),
    (["demo", "--steps", "0"], "--steps 0"),
    (["demo", "--nodes", "-1"], "--nodes -1"),
])
def test_non_positive_counts_are_refused_before_anything_starts(tmp_path, capsys, argv, named):
    out = tmp_path / "out"
    assert cli.main([*argv, "--out", str(out)]) == 2
    printed = capsys.readouterr()
    lines = printed.out.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "at least 1" in lines[0], printed
    assert lines[0].startswith(f"verl-rfpp {argv[0]}: ")
    assert not out.exists()  # nothing built, nothing started


def _out_cases(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    return {"an existing file": (a_file, "is a file, not a directory"),
            "below a file": (a_file / "out", "is a file, so no directory can be made below it"),
            "an empty path": ("", "an empty path"),
            "an unwritable directory": (locked, "may not write to"),
            "below an unwritable directory": (locked / "out", "may not write to")}


@pytest.mark.parametrize("case", ["an existing file", "below a file", "an empty path", "an unwritable directory",
                                  "below an unwritable directory"])
@pytest.mark.parametrize("command", [["demo"], ["bandit"], ["curves"], ["curves", "--task", "noisy"]])
def test_an_unusable_out_is_refused_in_one_line(tmp_path, capsys, command, case):
    if case.endswith("unwritable directory") and os.geteuid() == 0:
        pytest.skip("root may write anywhere")
    path, why = _out_cases(tmp_path)[case]
    assert cli.main([*command, "--out", str(path)]) == 2
    printed = capsys.readouterr()
    lines = printed.out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"verl-rfpp {command[0]}: --out {path}: "), printed
    assert why in lines[0], printed
    assert "name a directory you can write to" in lines[0] and printed.err == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"a_file", "locked"})  # nothing written


def test_a_usable_out_is_kept_as_a_path(tmp_path):
    args = cli.build_parser().parse_args(["bandit", "--out", str(tmp_path / "new" / "dir")])
    assert args.out == tmp_path / "new" / "dir" and not args.out.exists()  # created by the command, not the parser


def test_a_relative_out_is_kept_absolute(tmp_path, monkeypatch):
    """verl's Ray workers run in another working directory: a relative --out would name the model
    there (measured: `demo --legacy --out DIR` with a relative DIR failed, transformers reading
    DIR/assets/model as a hub repo id)."""
    monkeypatch.chdir(tmp_path)
    for command in ("demo", "curves", "bandit"):
        args = cli.build_parser().parse_args([command, "--out", "runs/a"])
        assert args.out == tmp_path / "runs" / "a" and args.out.is_absolute()


# --- doctor --ray: a malformed or unreachable address is one line and exit 2, before Ray starts ---

@pytest.mark.parametrize("address,found", [
    ("", "an empty address"),
    ("   ", "an empty address"),
    ("nonsense", "not a Ray address"),
    ("127.0.0.1", "not a Ray address"),
    (":6379", "not a Ray address"),
    ("http://127.0.0.1:6379", "not a Ray address"),
    ("127.0.0.1:99999", "port 99999 is not a TCP port"),
    ("local", "`local` starts a new Ray instance"),
    ("127.0.0.1:1", "nothing accepts connections at 127.0.0.1:1"),
    ("ray://127.0.0.1:1", "nothing accepts connections at 127.0.0.1:1"),
])
def test_doctor_ray_refuses_a_bad_address_in_one_line(capsys, address, found):
    started = time.monotonic()
    assert cli.main(["doctor", "--ray", address]) == 2
    printed = capsys.readouterr()
    lines = printed.out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"verl-rfpp doctor --ray {address!r}: {found}"), printed
    assert "Fix: " in lines[0]
    assert time.monotonic() - started < 10


def test_doctor_ray_auto_checks_the_address_in_ray_address(capsys, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    assert cli.main(["doctor", "--ray", "auto"]) == 2
    line = capsys.readouterr().out.strip()
    assert line.startswith("verl-rfpp doctor --ray 'auto': nothing accepts connections at 127.0.0.1:1 "
                           "(RAY_ADDRESS=127.0.0.1:1)"), line
