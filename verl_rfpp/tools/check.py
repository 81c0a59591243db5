"""``verl-rfpp check``: a launch script's main_ppo runs (read by ``verl_rfpp.tools.scripts``, never
run) or main_ppo's overrides, each composed as main_ppo would and judged by ``verdict.judge``
(docs/contract.md section 6.5). ``command`` is what the CLI calls; the rest is how a run's lines
are made."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Optional, Sequence

from verl_rfpp.contract import validation
from verl_rfpp.tools import quiet

HELP = """SCRIPT: a bash launch script that starts python -m verl.trainer.main_ppo. It is read, never
run: check parses it (tree-sitter-bash) and evaluates only what bash decides by itself
(assignments, export, parameter expansions, quoting, if/case/[ ]/[[ ]] on known values, for
and while loops over known values, && and ||, functions, shift, source of a file it can
read). No command
of the script runs. A command substitution gets what a Linux machine with NVIDIA GPUs gives
(python3 -c 'import torch_npu' fails) or is a value check does not know, which may only reach
settings the verdict does not read; each assumption is printed as one line "assumed: ...".
What check cannot read safely (eval, a test on an unknown value that decides a run, a
here-document fed to main_ppo, ...) is exit 2 naming the line: pass the overrides directly, or
set the variable for the reading (VAR=value verl-rfpp check SCRIPT). Every main_ppo run the
script makes is judged, one block each ("run K of N (SCRIPT:LINE): ..."), in the environment the
script gives it: when the script sets VERL_USE_EXTERNAL_PLUGINS, VERL_USE_EXTERNAL_MODULES or
PYTHONPATH, a child python imports verl (and the modules those name) with them, as the run would.

ARGUMENTS: every word after SCRIPT is the script's own argument ($1, "$@"), as in
bash SCRIPT ARGUMENTS; check's options go before SCRIPT. Overrides for main_ppo are appended
after the script's own arguments and reach it only through the script's "$@".
Without SCRIPT, the words are main_ppo's Hydra overrides.

exit status (several runs: the worst of them, 2 > 3 > 1 > 0):
  0  the config runs the estimator as docs/contract.md defines it (or selects none of ours)
  1  refused: rule violations (each with its contract id, 6.2.x), a misspelt estimator name, or
     verl would not run our estimator (activation); the last line, Fix: ..., is the command
     (for SCRIPT) or the overrides to append after the script's own arguments
  2  usage: a bad option, a file that is not a bash script, a script check cannot read safely
     or that launches no main_ppo run
  3  Hydra cannot compose the overrides with verl's ppo_trainer config (unknown key, bad syntax,
     a config group set to null), or a key the rules read does not resolve (an unset
     ${oc.env:...}, a missing key in an interpolation, ???)

Other libraries' messages (verl's import-time warnings) go to a log file of check's own, named
in one line before the verdict when anything was written to it; -v shows them on the terminal."""

WORST_FIRST = (2, 3, 1, 0)  # several runs: the exit status is the worst (2: a run check cannot judge)


def command(words: Sequence[str], verbose: bool = False, config_path: Optional[str] = None,
            config_name: Optional[str] = None) -> int:
    """``verl-rfpp check``: read the runs (a script's main_ppo launches, or overrides), compose verl's
    config as main_ppo would, and print the verdict of each; the worst exit status."""
    from verl_rfpp.tools import scripts

    words = list(words)
    try:
        script = bool(words) and scripts.is_script(words[0])
    except scripts.ScriptError as error:
        print(f"verl-rfpp check: {error}")
        return 2
    if script and (config_path or config_name):
        print("verl-rfpp check: --config-path/--config-name belong on the script's main_ppo line")
        return 2
    if not script:
        return _check_overrides(words, verbose, config_path, config_name)
    extra = words[1:]
    try:
        reading = scripts.read_script(Path(words[0]), extra)
    except scripts.ScriptError as error:
        print(f"verl-rfpp check: {error}")
        return 2
    for assumption in reading.assumptions:
        print(f"assumed: {assumption}")
    shown = ("bash", words[0], *extra)
    statuses, verdicts = [], io.StringIO()
    with quiet.quiet("check", verbose=verbose) as log, contextlib.redirect_stdout(verdicts):
        for number, launch in enumerate(reading.launches, 1):
            if len(reading.launches) > 1:
                print(f"run {number} of {len(reading.launches)} ({words[0]}:{launch.line}): {launch.launcher}")
            statuses.append(_check_launch(launch, reading, words[0], shown))
    _print_after(log, verdicts.getvalue())
    return max(statuses, key=WORST_FIRST[::-1].index)


def _check_overrides(words: list, verbose: bool, config_path: Optional[str], config_name: Optional[str]) -> int:
    """``check [-v] [-cp DIR] [-cn NAME] OVERRIDES``: one verdict on the overrides, read by main_ppo's
    own parser (``scripts.parse_main_ppo``)."""
    from verl_rfpp.tools import scripts

    verbose = verbose or any(word in ("-v", "--verbose") for word in words)
    given = [*(("--config-path", config_path) if config_path else ()),
             *(("--config-name", config_name) if config_name else ()),
             *(word for word in words if word not in ("-v", "--verbose"))]
    try:
        run = scripts.parse_main_ppo(given)
    except scripts.ScriptError as error:
        print(f"verl-rfpp check: {error}; check takes -v, main_ppo's options and overrides, or SCRIPT "
              "[ARGUMENTS...] (see verl-rfpp check --help)")
        return 2
    with quiet.quiet("check", verbose=verbose) as log:
        config_path, config_name, overrides = run.composition()
        status, lines = _judge(overrides, config_path, config_name)
    _print_after(log, "\n".join(lines) + "\n")
    return status


def _print_after(log: quiet.QuietLog, verdicts: str) -> None:
    """The line naming check's log of other libraries' messages (when anything went there), then
    the verdicts: a refusal's ``Fix:`` stays the last line."""
    if log.mention():
        print(log.mention())
    print(verdicts, end="")


def _check_launch(launch, reading, script: str, shown: tuple) -> int:
    """One run of a script: its overrides judged in the environment the script gives it. A value the
    reading cannot know is exit 2 unless it is only the value of keys the verdict does not read, and
    two stand-ins of it (a word and a number) give the same status and rule ids."""
    from verl_rfpp.tools import scripts

    try:
        run = scripts.parse_main_ppo(launch.known("unknown"))
    except scripts.ScriptError as error:
        print(f"verl-rfpp check: {script}:{launch.line}: {error}")
        return 2
    loaded = _loaded_for(launch, reading, script)
    if isinstance(loaded, int):
        return loaded
    unknowns = launch.unknown_parts()
    reached = _unknown_read(launch, unknowns)
    if reached:
        print(f"verl-rfpp check: {script}:{launch.line}: the verdict may depend on a value check cannot know "
              f"without running something ({reached}); {scripts.WAY_OUT}")
        return 2
    config_path, config_name, overrides = run.composition()
    status, lines = _judge(overrides, config_path, config_name, shown, launch.forwards, loaded)
    if unknowns:
        number = scripts.parse_main_ppo(launch.known("1")).composition()
        other = _judge(number[2], number[0], number[1], shown, launch.forwards, loaded)
        if _rule_ids(other) != _rule_ids((status, lines)):
            where = "; ".join(f"{script}:{line}: {construct}" for line, construct in unknowns)
            print(f"verl-rfpp check: the verdict depends on a value check cannot know without running something "
                  f"({where}); {scripts.WAY_OUT}")
            return 2
        for line, construct in unknowns:
            print(f"assumed: {script}:{line}: `{construct}` is not known without running it; it is the value of "
                  "a key no rule reads, one Hydra's override grammar reads")
    print("\n".join(lines))
    return status


def _unknown_read(launch, unknowns: list) -> str:
    """Where an unknown value could reach the verdict: in a config option, in a key, or as the value
    of a key the verdict reads (``validation.reads``); "" when it is only the value of other keys."""
    if not unknowns:
        return ""
    for argument in launch.arguments:
        if not any(marker in argument for marker in launch.unknowns or {}):
            continue
        key, equals, _ = argument.partition("=")
        shown = launch.known("<unknown>")[launch.arguments.index(argument)]
        if not equals or argument.startswith("-") or any(marker in key for marker in launch.unknowns):
            return f"{shown!r} is not KEY=VALUE with a known KEY"
        if validation.reads(key):
            return f"{shown!r} sets a key the verdict reads"
    return ""


def _rule_ids(judged: tuple) -> tuple:
    """A verdict's exit status and the rule ids it names (its text names the stand-in value)."""
    status, lines = judged
    return status, tuple(sorted(set(re.findall(r"\[(6\.\d+(?:\.\d+)?)\]", "\n".join(lines)))))


def _loaded_for(launch, reading, script: str):
    """What verl loads in the launch's environment when the script changes it (``None``: check's
    own environment holds); an exit status when that cannot be found out."""
    from verl_rfpp.adapter import environment

    changed = environment.differs(launch.environment)
    if not changed:
        return None
    for name, value in changed.items():
        where = reading.exported_at.get(name)
        print(f"note: the script runs main_ppo with {name}={value!r}" + (f" ({script}:{where})" if where else ""))
    try:
        return environment.loaded_in(launch.environment)
    except environment.EnvironmentUnknown as error:
        print(f"verl-rfpp check: cannot judge this run in the script's environment: {error}")
        return 2


def _judge(overrides: Sequence[str], config_path: Optional[str], config_name: Optional[str],
           shown: Sequence[str] = (), forwards: bool = True, loaded=None) -> tuple[int, list]:
    """The verdict on one run's overrides: its exit status and the lines to print."""
    from verl_rfpp.adapter import loading

    plugin_loaded = loading.verl_loads_plugin()
    from verl_rfpp.adapter import compose, verdict

    try:
        config = compose.compose_verl_config(list(overrides), config_path, config_name)
    except ImportError:
        raise
    except Exception as error:  # noqa: BLE001 (Hydra raises ValueError, KeyError, ... besides its own types)
        return 3, [_composition_error(error, overrides)]
    found = verdict.judge(config, plugin_loaded=plugin_loaded)
    if loaded is not None:
        found = _in_environment(found, loaded)
    unreadable = found.unread or (
        found.refusal if isinstance(found.refusal, validation.UnreadableConfigError) else None)
    if unreadable is not None:
        return found.status, [_unreadable_message(unreadable, overrides)]
    if found.refusal is not None:
        return found.status, _refusal_lines(found.refusal, shown, forwards)
    return found.status, [f"warning: {note}" for note in found.warnings] + [found.summary()]


def _in_environment(found, loaded):
    """``found`` as verl in the script's environment would have it (``loaded``: what it loads there)."""
    from verl_rfpp.adapter import verdict
    from verl_rfpp.adapter.registries import ActivationError

    if found.estimator is not None and not loaded.loaded:
        return verdict.Verdict(found.name, found.estimator, refusal=ActivationError(loaded.problems[found.estimator]))
    if isinstance(found.refusal, validation.MisspeltEstimatorError) and found.name in loaded.registered:
        return verdict.Verdict(found.name, None)
    return found


def _refusal_lines(refusal: Exception, shown: Sequence[str], forwards: bool) -> list:
    """The refusal; its closing ``Fix:`` line, for a script, is the script's command with the fixes."""
    lines = str(refusal).splitlines()
    fixes = getattr(refusal, "fixes", None)
    if fixes is None or not shown:
        return lines
    lines = lines[:-1]
    if not forwards:
        lines.append(f'note: {shown[1]} does not pass its own arguments on to main_ppo (no "$@" at the end of its '
                     'main_ppo line): put these overrides at the end of that line, or end it with "$@" and run the '
                     "Fix command")
    return lines + [validation.fix_line(list(fixes), tuple(shown))]


def _composition_error(error: Exception, overrides: Sequence[str]) -> str:
    """One short message for a Hydra error: the override it names (or fails to parse) and why."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    culprit = None
    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_override(override)
        except Exception:  # noqa: BLE001 (Hydra's grammar errors have no common public base)
            return _composition_message(error, override)
        if f"'{override.split('=', 1)[0].lstrip('+~')}'" in str(error):
            culprit = override  # the last override of the key Hydra names
    if culprit is None and "Config group override" in str(error):  # Hydra names no group: a null one
        culprit = next((o for o in reversed(overrides) if o.partition("=")[2].strip().lower() == "null"), None)
    return _composition_message(error, culprit)


def _composition_message(error: Exception, culprit: Optional[str]) -> str:
    reason = " ".join(str(error).split())
    if error.__cause__ is not None:
        reason += f" ({' '.join(str(error.__cause__).split()[:12])})"
    where = f"in override {culprit!r}" if culprit else "in the overrides"
    return f"verl-rfpp check: Hydra cannot compose verl's ppo_trainer config {where}: {reason}"


def _unreadable_message(error: validation.UnreadableConfigError, overrides: Sequence[str]) -> str:
    """One line for a key the rules read that does not resolve, naming the override that set it."""
    setting = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") == error.key]
    where = f" (set by override {setting[-1]!r})" if setting else ""
    return f"verl-rfpp check: cannot resolve {error.key}{where}: {error.reason}. Fix: {error.fix}."
