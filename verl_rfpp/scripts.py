"""What a launch script passes to ``verl.trainer.main_ppo``, found by running the script with
stand-ins for the commands that start Python (docs/contract.md section 6.5).

The script runs under bash, in its own process group, with ``python``, ``python3``, ``uv``,
``torchrun`` and ``ray`` on ``PATH`` replaced by a stand-in that records its arguments and runs
nothing. The first call that starts ``verl.trainer.main_ppo`` (``-m verl.trainer.main_ppo`` or a
path ending in ``verl/trainer/main_ppo.py``, wherever it sits in the command: ``uv run``,
``torchrun``, ``ray job submit --``) ends the whole script there: nothing of it runs past that
call. Imports no verl.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

MAIN_PPO = "verl.trainer.main_ppo"
STAND_INS = ("python", "python3", "uv", "torchrun", "ray")
PROBE = "verl_rfpp_forwarded_arguments_probe=1"
"""Appended to the script's own arguments: reaching main_ppo, it shows that appended overrides do."""

_STAND_IN = """#!/usr/bin/env bash
printf '%s\\0' "$@" > "$(mktemp "{record}/call.$(date +%s%N).XXXX")"
for argument in "$@"; do
  case "$argument" in {module}|*verl/trainer/main_ppo.py) kill -TERM 0 ;; esac
done
exit 0
"""
_LAUNCH_LINE = re.compile(r"^[^#]*\bverl[./]trainer[./]main_ppo\b", re.M)


class ScriptError(Exception):
    """A script that cannot be read as one main_ppo run: it launches nothing, or several."""


@dataclass(frozen=True)
class Launch:
    """The arguments the script gives ``main_ppo``; ``forwards``: whether arguments given to the
    script reach them (its main_ppo line ends with ``"$@"``)."""

    arguments: tuple[str, ...]
    forwards: bool


def is_script(word: str) -> bool:
    """Whether a command-line word names a launch script: an existing file (an override never is)."""
    return "=" not in word and Path(word).is_file()


def main_ppo_arguments(argv: Sequence[str]) -> Optional[list[str]]:
    """The arguments after ``-m verl.trainer.main_ppo`` (or ``.../verl/trainer/main_ppo.py``) in
    one command's ``argv``, else ``None``."""
    for index, argument in enumerate(argv):
        if argument == MAIN_PPO and index > 0 and argv[index - 1] == "-m":
            return list(argv[index + 1:])
        if argument.endswith("verl/trainer/main_ppo.py"):
            return list(argv[index + 1:])
    return None


def launch_lines(script: Path) -> int:
    """How many lines of ``script`` (comments aside) start main_ppo."""
    return len(_LAUNCH_LINE.findall(Path(script).read_text(errors="replace")))


def record_launch(
    script: Path, arguments: Sequence[str] = (), env: Optional[Mapping[str, str]] = None,
    cwd: Optional[Path] = None, timeout: float = 60,
) -> Launch:
    """Run ``bash script arguments... PROBE`` with the stand-ins; the main_ppo call it makes.
    ``ScriptError`` when it makes none or the script has several main_ppo lines."""
    script = Path(script)
    lines = launch_lines(script)
    if lines > 1:
        raise ScriptError(f"{script} has {lines} lines that start {MAIN_PPO}: several runs; check each run's "
                          f"command on its own (verl-rfpp check OVERRIDES...)")
    with tempfile.TemporaryDirectory(prefix="verl-rfpp-script-") as scratch:
        record = Path(scratch) / "calls"
        record.mkdir()
        bin_dir = Path(scratch) / "bin"
        bin_dir.mkdir()
        for name in STAND_INS:
            stand_in = bin_dir / name
            stand_in.write_text(_STAND_IN.format(record=record, module=MAIN_PPO))
            stand_in.chmod(0o755)
        environment = {**(os.environ if env is None else env)}
        environment["PATH"] = f"{bin_dir}:{environment.get('PATH', '')}"
        process = subprocess.Popen(
            ["bash", str(script), *arguments, PROBE], env=environment, cwd=cwd, start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise ScriptError(f"{script} did not start {MAIN_PPO} within {timeout:.0f} s") from None
        calls = [path.read_bytes().decode(errors="surrogateescape").split("\0")[:-1]
                 for path in sorted(record.iterdir())]
    launches = [arguments for arguments in map(main_ppo_arguments, calls) if arguments is not None]
    if not launches:
        tail = "\n".join(output.decode(errors="replace").strip().splitlines()[-5:])
        raise ScriptError(f"{script} launches no run: it did not start {MAIN_PPO} through python, python3, uv, "
                          f"torchrun or ray found on PATH (exit status {process.returncode})"
                          + (f"; its last output:\n{tail}" if tail else ""))
    found = launches[0]
    forwards = bool(found) and found[-1] == PROBE
    return Launch(tuple(found[:-1] if forwards else found), forwards)


# main_ppo's own (Hydra's) options that choose the config; the rest of its arguments are overrides.
_CONFIG_OPTIONS = {"--config-path": "config_path", "-cp": "config_path", "--config-name": "config_name",
                   "-cn": "config_name"}


@dataclass(frozen=True)
class MainPpoCommand:
    """main_ppo's arguments read as Hydra reads them: the config options and the overrides."""

    overrides: tuple[str, ...]
    config_path: Optional[str] = None
    config_name: Optional[str] = None


def parse_main_ppo(arguments: Sequence[str]) -> MainPpoCommand:
    """Split main_ppo's arguments into Hydra's config options (``--config-path X``,
    ``--config-path=X``, ``-cp X``, ...) and the overrides. ``ScriptError`` for another Hydra
    option (``--multirun``, ``--cfg``, ...): not one run's config."""
    options: dict[str, str] = {}
    overrides: list[str] = []
    words = list(arguments)
    while words:
        word = words.pop(0)
        flag, equals, value = word.partition("=")
        if flag in _CONFIG_OPTIONS:
            if not equals:
                if not words:
                    raise ScriptError(f"main_ppo option {flag} has no value")
                value = words.pop(0)
            options[_CONFIG_OPTIONS[flag]] = value
        elif word.startswith("-"):
            raise ScriptError(f"main_ppo option {word!r} is not one run's config (verl-rfpp check reads "
                              "--config-path/-cp, --config-name/-cn and overrides)")
        else:
            overrides.append(word)
    return MainPpoCommand(tuple(overrides), **options)
