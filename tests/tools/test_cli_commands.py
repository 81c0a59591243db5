"""The command line's own surface (issue 30 items 3, 4, 6; issue 29 item 7): --version, a bare
``verl-rfpp``, help texts with defaults, ``recipe`` without verl or torch, the KL on ``check``'s OK
line (contract 6.5), the variance floor in the demo's progress line, ``doctor --ray`` on any address
string, commands that print only their own lines, and Ctrl-C (one line, exit 130, nothing left)."""

from __future__ import annotations

import argparse
import importlib
import ipaddress
import json
import os
import re
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
from importlib import metadata
from pathlib import Path

import psutil
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from support.composed import compose

from verl_rfpp import catalog, validation
from verl_rfpp.adapter import verdict
from verl_rfpp.cli import cluster_doctor
from verl_rfpp.cli import main as cli
from verl_rfpp.cpu import demo

pytestmark = pytest.mark.usefixtures("cached_composition")  # tests/conftest.py: the tier's cached composition

ACTOR = "actor_rollout_ref.actor"


# --- --version, a bare verl-rfpp, help ----------------------------------------------------------

def test_version_names_verl_rfpp_and_verl_from_the_installed_metadata(capsys):
    assert cli.main(["--version"]) == 0
    line = capsys.readouterr().out
    assert line == (f"verl-rfpp {metadata.version('verl-rfpp')} (verl {metadata.version('verl')}, "
                    f"Python {sys.version.split()[0]})\n")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_a_bare_verl_rfpp_prints_the_usage_and_every_command_in_one_line(capsys):
    assert cli.main([]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "usage: verl-rfpp [-h] [--version] COMMAND ..."
    listed = [line.split()[0] for line in lines if line.startswith("  ")]
    assert listed == list(_subcommands(cli.build_parser()))  # every command, in the parser's order
    for line in lines:
        if line.startswith("  "):
            name, text = line.split(maxsplit=1)
            assert text == cli.COMMANDS[name] and len(text) > 10


def _options(parser: argparse.ArgumentParser):
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_option_has_help_text_and_its_help_shows_the_default(command, capsys):
    parser = _subcommands(cli.build_parser())[command]
    assert cli.main([command, "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    for action in _options(parser):
        assert action.help and len(action.help) > 10, (command, action.dest)
        if not action.option_strings or action.nargs == 0 or action.required:
            continue  # a positional, a flag (off unless given), or an option that must be given
        if action.default is None:  # the text itself says what happens without the option
            assert "default" in action.help, (command, action.dest)
        else:
            assert f"(default: {action.default})" in shown or "default" in action.help, (command, action.dest)


def test_every_command_takes_verbose():
    parser = cli.build_parser()
    for command in cli.COMMANDS:
        options = {o for a in _options(_subcommands(parser)[command]) for o in a.option_strings}
        assert {"-v", "--verbose"} <= options, command


# --- check's OK line names the KL in use (contract 6.5) -----------------------------------------

BASELINE = list(validation.RECIPES[catalog.REINFORCE_PLUS_PLUS_BASELINE.name])
RFPP = list(validation.RECIPES[catalog.REINFORCE_PLUS_PLUS.name])


@pytest.mark.parametrize("overrides,kl", [
    (BASELINE, "k2 loss, coefficient 0.01"),
    ([*BASELINE, f"{ACTOR}.kl_loss_coef=0.001", f"{ACTOR}.kl_loss_type=mse"], "k2 loss, coefficient 0.001"),
    ([*BASELINE, f"{ACTOR}.use_kl_loss=False"], "off"),
    (RFPP, "k1 in the reward, coefficient 0.01"),
    ([*RFPP, "algorithm.kl_ctrl.kl_coef=1e-3", "algorithm.kl_penalty=k1"], "k1 in the reward, coefficient 0.001"),
    ([*RFPP, "algorithm.use_kl_in_reward=False"], "off"),
])
def test_the_ok_line_names_the_kl_in_use(overrides, kl):
    found = verdict.judge_config(compose(overrides))
    assert found.status == verdict.OK
    assert found.summary() == (f"OK: this config runs {found.estimator} as docs/contract.md defines it; KL: {kl}.")


@settings(max_examples=15, deadline=None)
@given(coefficient=st.floats(min_value=0, max_value=10, allow_nan=False), ours=st.sampled_from([BASELINE, RFPP]))
def test_the_ok_line_carries_the_configured_coefficient(coefficient, ours):
    key = f"{ACTOR}.kl_loss_coef" if ours is BASELINE else "algorithm.kl_ctrl.kl_coef"
    line = verdict.judge_config(compose([*ours, f"{key}={coefficient!r}"])).summary()
    assert float(re.fullmatch(r".*; KL: k[12] .*, coefficient (\S+)\.", line).group(1)) == coefficient


def test_check_prints_the_kl_of_a_kept_reward_kl(capsys):
    assert cli.main(["check", *RFPP, "algorithm.kl_ctrl.kl_coef=0.001"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("; KL: k1 in the reward, coefficient 0.001.")


# --- the demo's progress line says when the variance floor was used -----------------------------

def test_a_step_that_used_the_variance_floor_says_so():
    metrics = {"critic/score/mean": 1.0, "actor/kl_loss": 0.001, "rfpp/adv_std": 0.0, "timing_s/step": 2.0}
    plain = demo.progress_line(37, 40, {**metrics, "rfpp/var_floor_used": 0.0})
    assert plain == demo.progress_line(37, 40, metrics) == (
        "step 37/40  reward 1.000  kl_loss 0.00100  adv_std 0.000  2.0 s")
    floored = demo.progress_line(37, 40, {**metrics, "rfpp/var_floor_used": 1.0})
    assert floored == ("step 37/40  reward 1.000  kl_loss 0.00100  adv_std 0.000 (variance floor used: raw "
                       "advantages' variance < 1e-8)  2.0 s")


# --- doctor --ray: every address string is one line and exit 2 within its bound -----------------

LABEL = st.text(st.sampled_from("ab-_é0Z\u00df\u4e2dxn"), max_size=70)
HOST = st.one_of(st.lists(LABEL, min_size=1, max_size=4).map(".".join), st.text(max_size=80),
                 st.sampled_from(["", ".", "..", "head..cluster", "a" * 64, "[::1]", "[zz]", "0", "localhost"]))
PORT = st.one_of(st.integers(-5, 70000).map(str), st.text("0123456789:", max_size=7))
ADDRESS = st.one_of(
    st.text(max_size=40),
    st.builds(lambda scheme, host, port: f"{scheme}{host}:{port}", st.sampled_from(["", "ray://", "http://"]),
              HOST, PORT),
)


def _numeric_only(host, port, *args, **kwargs):
    """The real ``getaddrinfo`` (its idna encoding and argument checks, where UnicodeError and
    ValueError come from) with ``AI_NUMERICHOST``: IP literals resolve, a name is gaierror, and no
    query leaves this machine."""
    return _GETADDRINFO(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)


_GETADDRINFO = socket.getaddrinfo


def _resolved_or_refused(text: str, address: str = None) -> None:
    started = time.monotonic()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(cluster_doctor.socket, "getaddrinfo", _numeric_only)
            found = cluster_doctor.resolve(address or text)
    except cluster_doctor.AddressError as error:
        message = str(error)
        assert "\n" not in message and message.startswith(f"verl-rfpp doctor --ray {address or text!r}: ")
        assert "Fix: " in message
    else:
        if found is not None:  # an IP address, the port as given, nothing connected to
            ipaddress.ip_address(found[0])
            assert 0 < found[1] < 65536
    assert time.monotonic() - started < cluster_doctor.CONNECT_TIMEOUT_S + 2


@settings(max_examples=150, deadline=None)
@given(address=ADDRESS)
def test_any_address_string_resolves_or_is_one_line(address):
    """Only the syntax and a numeric-only lookup (``resolve``): nothing connects anywhere."""
    _resolved_or_refused(address)


@settings(max_examples=50, deadline=None)
@given(address=ADDRESS)
@example(address="0\n0")  # RAY_ADDRESS was printed as given: a two-line refusal
def test_any_ray_address_with_auto_resolves_or_is_one_line(address):
    assume("\x00" not in address)  # no environment variable can hold a NUL byte
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_ADDRESS", address)
        _resolved_or_refused(address, "auto")


@pytest.mark.parametrize("address,environment", [
    ("head..cluster:6379", None),
    ("a" * 64 + ".cluster:6379", None),
    ("ray://" + "b" * 70 + ":10001", None),
    ("auto", "head..cluster:6379"),
])
def test_a_host_name_the_resolver_refuses_is_one_line_and_exit_2(address, environment, capsys, monkeypatch):
    if environment:
        monkeypatch.setenv("RAY_ADDRESS", environment)
    assert cli.main(["doctor", "--ray", address]) == 2
    printed = capsys.readouterr()
    lines = printed.out.splitlines()
    assert len(lines) == 1 and "is not a valid host name" in lines[0] and printed.err == "", printed
    assert lines[0].startswith(f"verl-rfpp doctor --ray {address!r}: host ")
    assert (f"(RAY_ADDRESS={environment})" in lines[0]) == bool(environment)


def test_a_name_lookup_that_hangs_is_cut_at_its_bound(monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(cluster_doctor.socket, "getaddrinfo", lambda *args, **kwargs: release.wait(30))
    monkeypatch.setattr(cluster_doctor, "CONNECT_TIMEOUT_S", 0.5)
    started = time.monotonic()
    try:
        with pytest.raises(cluster_doctor.AddressError, match="did not resolve within 0.5 s"):
            cluster_doctor.resolve("slow.example:6379")
        assert time.monotonic() - started < 2
    finally:
        release.set()


def test_the_console_script_and_python_m_run_one_function(monkeypatch, capsys):
    """pyproject.toml's ``verl-rfpp`` names ``verl_rfpp.cli.main:main``, and ``python -m verl_rfpp.cli``
    (what the tests and ``doctor --ray``'s nodes run) is that command: run here as ``-m`` runs it
    (``runpy``, the package's ``__main__``), its exit status and lines are the function's."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    module, _, function = project["scripts"]["verl-rfpp"].partition(":")
    assert getattr(importlib.import_module(module), function) is cli.main
    monkeypatch.setattr(sys, "argv", ["verl-rfpp", "recipe", "reinforce_plus_plus"])
    with pytest.raises(SystemExit) as stopped:
        runpy.run_module("verl_rfpp.cli", run_name="__main__")
    assert stopped.value.code == 0
    assert capsys.readouterr().out.splitlines() == list(validation.RECIPES["reinforce_plus_plus"])
    monkeypatch.setattr(sys, "argv", ["verl-rfpp", "recipe", "no_such_estimator"])
    with pytest.raises(SystemExit) as stopped:
        runpy.run_module("verl_rfpp.cli", run_name="__main__")
    assert stopped.value.code == 2


# --- commands that start processes: only their own lines; Ctrl-C ---------------------------------

def _run(*argv, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "verl_rfpp.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_recipe_imports_neither_verl_nor_torch_and_prints_only_the_recipe():
    code = ("import json, sys\nfrom verl_rfpp.cli.main import main\ncode = main(['recipe', 'reinforce_plus_plus'])\n"
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\nsys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    *recipe, loaded = done.stdout.splitlines()
    assert recipe == list(validation.RECIPES["reinforce_plus_plus"])
    assert not {"verl", "torch", "numpy", "ray", "hydra", "numba"} & set(json.loads(loaded))


OURS = re.compile(r"^((ok  |FAIL)  .+|verl-rfpp is active\.|)$")


@pytest.mark.slow
def test_doctor_prints_only_its_own_lines_and_verbose_shows_verls(tmp_path):
    quiet_run = _run("doctor", env={"TMPDIR": str(tmp_path)})
    assert quiet_run.returncode == 0 and quiet_run.stderr == "", quiet_run.stderr
    lines = quiet_run.stdout.splitlines()
    assert all(OURS.match(line) for line in lines), quiet_run.stdout
    assert lines[-1] == "verl-rfpp is active." and lines[0].startswith("ok    verl ")  # no aside: no error among verl's
    loud = _run("doctor", "--verbose", env={"TMPDIR": str(tmp_path)})
    assert loud.returncode == 0 and "engine is not available" in loud.stderr
    assert loud.stdout.splitlines() == lines and os.listdir(tmp_path) == []  # nothing of its own left


def _in_its_environment(variable: str, value: str, below: bool = False) -> list[psutil.Process]:
    """The processes whose environment has ``variable=value`` (what a command's children inherit),
    or with ``below`` a path under the folder ``value`` (the trainer's TMPDIR is its run's ``tmp/``)."""
    found = []
    for process in psutil.process_iter():
        try:
            seen = process.environ().get(variable)
            if seen == value or (below and seen and seen.startswith(value.rstrip("/") + "/")):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _as_a_shell_starts_it() -> None:
    """SIGINT as a shell leaves it for the command it starts: default and unblocked. A child inherits
    an ignored or blocked SIGINT, and Python then installs no KeyboardInterrupt handler at all (a
    test worker in which something left SIGINT ignored made these tests time out)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _interrupt(argv, tmp_path, started):
    """Start ``verl-rfpp ARGV`` in a session of its own, wait for ``started(process, lines)`` (its
    stdout so far), send SIGINT to its process group as a terminal's Ctrl-C does; its result."""
    marker = f"verl-rfpp-interrupt-{os.getpid()}-{tmp_path.name}"
    env = {**os.environ, "TMPDIR": str(tmp_path), "VERL_RFPP_TEST_MARKER": marker}
    process = subprocess.Popen([sys.executable, "-m", "verl_rfpp.cli", *argv], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
                               preexec_fn=_as_a_shell_starts_it)
    lines: list[str] = []

    def read() -> None:
        for line in process.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 240
    while not started(lines) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert process.poll() is None, (lines, process.stderr.read())
    os.killpg(process.pid, signal.SIGINT)
    code = process.wait(timeout=60)
    reader.join(10)
    time.sleep(5)  # what it stopped has a moment to go
    return code, lines, process.stderr.read(), _in_its_environment("VERL_RFPP_TEST_MARKER", marker)


@pytest.mark.slow
def test_ctrl_c_in_bandit_is_one_line_and_exit_130(tmp_path):
    out = tmp_path / "out"
    code, lines, err, left = _interrupt(["bandit", "--quick", "--out", str(out)], tmp_path,
                                        lambda lines: out.exists())
    assert code == 130 and lines == ["verl-rfpp bandit: interrupted\n"], (lines, err)
    assert "Traceback" not in err and not left


@pytest.mark.slow
def test_ctrl_c_in_demo_stops_the_trainer_and_its_ray_and_removes_the_temporary_folder(tmp_path):
    ray_dirs: list[str] = []

    def training(lines):  # verl's Ray is up: its raylet carries the demo's environment (TMPDIR: the run's tmp/)
        raylets = [p for p in _in_its_environment("TMPDIR", str(tmp_path), below=True) if "raylet" in p.name()]
        ray_dirs[:] = [p.environ()["RAY_TMPDIR"] for p in raylets]
        return bool(raylets)

    code, lines, err, left = _interrupt(["demo", "--steps", "40"], tmp_path, training)
    assert code == 130, (lines, err)
    assert lines[-1] == "verl-rfpp demo: interrupted; stopped the trainer and its Ray processes\n", lines
    assert all(line.startswith(("verl-rfpp demo: ", "Starting verl", "step ")) for line in lines), lines
    assert "Traceback" not in err and err == "", err
    assert not left, [(p.pid, p.name()) for p in left]  # the trainer, Ray's processes: none is left
    assert not [name for name in os.listdir(tmp_path) if name.startswith("verl-rfpp-")]  # its folder, its log
    assert ray_dirs[0].startswith("/tmp/rfpp-ray-") and not os.path.exists(ray_dirs[0])  # Ray's own, removed
