"""``verl-rfpp check``: a launch script's main_ppo runs (read by ``verl_rfpp.cli.scripts``, never
run) or main_ppo's overrides, each composed as main_ppo would and judged by ``verdict.judge_config``
(docs/contract.md section 6.5). ``command`` is what the CLI calls; the rest is how a run's lines
are made."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence

from verl_rfpp import validation
from verl_rfpp.cli import quiet

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
PYTHONPATH, an isolated child python (python -I, only those variables, no sitecustomize,
LD_PRELOAD or PYTHONHOME of the script's, 120 s and 4 GiB at most) imports verl with them. The
user's modules the script names (VERL_USE_EXTERNAL_MODULES, verl plugins on its PYTHONPATH) are
imported only with --import-user-modules; without it, a verdict they could change is exit 2.
check itself starts no program (verl's nvidia-smi probe included).

ARGUMENTS: every word after SCRIPT is the script's own argument ($1, "$@"), as in
bash SCRIPT ARGUMENTS; check's options go before SCRIPT. Overrides for main_ppo are appended
after the script's own arguments and reach it only through the script's "$@".
Without SCRIPT, the words are main_ppo's Hydra overrides.

exit status (several runs: the worst of them, 2 > 3 > 1 > 0):
  0  the config runs the estimator as docs/contract.md defines it (or selects none of ours)
  1  refused: rule violations (each with its contract id, 6.2.x), a misspelt estimator name, or
     verl would not run our estimator (activation); the last line, Fix: ..., is the overrides to
     append, or for SCRIPT the command with them once check has read the script again with it and
     found every run accepted with its KL kept; else the overrides for the main_ppo line it names
     and, in a note before it, why the command would not do
  2  usage: a bad option, a file that is not a bash script, a script check cannot read safely
     or that launches no main_ppo run
  3  Hydra cannot compose the overrides with verl's ppo_trainer config (unknown key, bad syntax,
     a config group set to null), or a key the rules read does not resolve (an unset
     ${oc.env:...}, a missing key in an interpolation, ???)

check imports neither verl's Python nor torch where the installed packages settle the verdict
(a tested verl as installed, no other plugin or VERL_USE_EXTERNAL_MODULES): verl's config files,
Hydra and the package metadata suffice. Otherwise, and for a name that reads as ours misspelt, it
imports verl (a few seconds) as main_ppo would. Other libraries' messages (verl's import-time
warnings) are not shown, and mentioned in one line only when one of them is an error; -v shows
them on the terminal. check leaves no file: what other libraries write to the temporary directory
goes to one of its own, removed at the end."""

WORST_FIRST = (2, 3, 1, 0)  # several runs: the exit status is the worst (2: a run check cannot judge)


@dataclass
class Environments:
    """What verl loads in each environment a script gives its runs (one child process each), and
    whether those children import the user's modules the script names (``--import-user-modules``)."""

    import_user_modules: bool = False
    found: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Judged:
    """One run's verdict: its exit status, the lines of its block (a refusal's ending in its own
    ``Fix:`` line of overrides), the refusal's fixing overrides, and an accepted run's KL line."""

    status: int
    lines: tuple[str, ...]
    fixes: Optional[tuple[str, ...]] = None
    kl: str = ""


def check_command(words: Sequence[str], verbose: bool = False, config_path: Optional[str] = None,
            config_name: Optional[str] = None, import_user_modules: bool = False) -> int:
    """``verl-rfpp check``: read the runs (a script's main_ppo launches, or overrides), compose verl's
    config as main_ppo would, and print the verdict of each; the worst exit status."""
    with _own_platform_variable():
        try:
            return _command(list(words), verbose, config_path, config_name, import_user_modules)
        finally:
            _COMPOSITIONS.clear()


def _command(words: list, verbose: bool, config_path: Optional[str], config_name: Optional[str],
             import_user_modules: bool) -> int:
    from verl_rfpp.cli import scripts

    try:
        script = bool(words) and scripts.is_script(words[0])
    except scripts.ScriptError as error:
        _print(f"verl-rfpp check: {error}")
        return 2
    if script and (config_path or config_name):
        _print("verl-rfpp check: --config-path/--config-name belong on the script's main_ppo line")
        return 2
    if not script:
        return _check_overrides(words, verbose, config_path, config_name)
    path, extra = words[0], words[1:]
    try:
        reading = scripts.read_script(Path(path), extra)
    except scripts.ScriptError as error:
        _print(f"verl-rfpp check: {error}")
        return 2
    for assumption in reading.assumptions:
        _print(f"assumed: {assumption}")
    with quiet.quiet("check", verbose=verbose, keep=False) as log:
        loads = Environments(import_user_modules)
        runs = [_judge_launch(launch, reading, path, loads) for launch in reading.launches]
        endings = _fix_endings(path, extra, reading, runs, loads)
    if log.mention():
        _print(log.mention())
    for number, (launch, run) in enumerate(zip(reading.launches, runs, strict=True), 1):
        if len(runs) > 1:
            _print(f"run {number} of {len(runs)} ({launch.place(path)}): {launch.launcher}")
        _print("\n".join([*run.lines[:-1], *endings[number - 1]] if number - 1 in endings else run.lines))
    return max((run.status for run in runs), key=WORST_FIRST[::-1].index)


def _check_overrides(words: list, verbose: bool, config_path: Optional[str], config_name: Optional[str]) -> int:
    """``check [-v] [-cp DIR] [-cn NAME] OVERRIDES``: one verdict on the overrides, read by main_ppo's
    own parser (``scripts.parse_main_ppo``)."""
    from verl_rfpp.cli import scripts

    verbose = verbose or any(word in ("-v", "--verbose") for word in words)
    given = [*(("--config-path", config_path) if config_path else ()),
             *(("--config-name", config_name) if config_name else ()),
             *(word for word in words if word not in ("-v", "--verbose"))]
    try:
        run = scripts.parse_main_ppo(given)
    except scripts.ScriptError as error:
        _print(f"verl-rfpp check: {error}; check takes -v, main_ppo's options and overrides, or SCRIPT "
              "[ARGUMENTS...] (see verl-rfpp check --help)")
        return 2
    with quiet.quiet("check", verbose=verbose, keep=False) as log:
        judged = _judge(run)
    if log.mention():
        _print(log.mention())
    _print("\n".join(judged.lines))
    return judged.status


def _print(text: str) -> None:
    """``print``, with what stdout's encoding cannot show (a byte of the script that is not UTF-8,
    kept by the reader as a surrogate) written as a backslash escape instead of a traceback."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    print(text.encode(encoding, "backslashreplace").decode(encoding, "replace"))


def _judge_launch(launch, reading, script: str, loads: Environments, extra: Sequence[str] = ()) -> Judged:
    """One run of a script (with ``extra`` appended to its main_ppo arguments): its overrides judged
    in the environment the script gives it. A value the reading cannot know is exit 2 unless it is
    only the value of keys the verdict does not read and two stand-ins of it (a word and a number)
    give the same status and rule ids. ``loads``: what verl loads in each environment met so far
    (one child process per environment)."""
    from verl_rfpp.cli import scripts

    try:
        run = scripts.parse_main_ppo([*launch.known("unknown"), *extra])
    except scripts.ScriptError as error:
        return Judged(2, (f"verl-rfpp check: {launch.place(script)}: {error}",))
    notes, loaded = _loaded_for(launch, reading, script, loads)
    if isinstance(loaded, int):
        return Judged(loaded, notes)
    unknowns = launch.unknown_parts()
    reached = _unknown_read(launch, unknowns)
    if reached:
        return Judged(2, (*notes, f"verl-rfpp check: {launch.place(script)}: the verdict may depend on a value check "
                                  f"cannot know without running something ({reached}); {scripts.WAY_OUT}"))
    judged = _judge(run, loaded)
    if loaded is not None and loaded.not_imported and judged.status != 2:
        notes += (f"note: not imported: {', '.join(loaded.not_imported)} (--import-user-modules imports it; it cannot "
                  "change this verdict)",)
    if unknowns:
        other = _judge(scripts.parse_main_ppo([*launch.known("1"), *extra]), loaded)
        if _rule_ids(other) != _rule_ids(judged):
            where = "; ".join(f"{scripts.at(script, line)}: {construct}" for line, construct in unknowns)
            return Judged(2, (*notes, f"verl-rfpp check: the verdict depends on a value check cannot know without "
                                      f"running something ({where}); {scripts.WAY_OUT}"))
        notes += tuple(f"assumed: {scripts.at(script, line)}: `{construct}` is not known without running it; it is the "
                       "value of a key no rule reads, one Hydra's override grammar reads"
                       for line, construct in unknowns)
    return Judged(judged.status, (*notes, *judged.lines), judged.fixes, judged.kl)


def _unknown_read(launch, unknowns: list) -> str:
    """Where an unknown value could reach the verdict: in a config option, in a key, or as the value
    of a key the verdict reads (``validation.reads``); "" when it is only the value of other keys."""
    if not unknowns:
        return ""
    shown = launch.known("<unknown>")
    for index, argument in enumerate(launch.arguments):
        if not any(marker in argument for marker in launch.unknowns or {}):
            continue
        key, equals, _ = argument.partition("=")
        if not equals or argument.startswith("-") or any(marker in key for marker in launch.unknowns):
            return f"{shown[index]!r} is not KEY=VALUE with a known KEY"
        if validation.reads(key):
            return f"{shown[index]!r} sets a key the verdict reads"
    return ""


def _rule_ids(judged: Judged) -> tuple:
    """A verdict's exit status and the rule ids it names (its text names the stand-in value)."""
    return judged.status, tuple(sorted(set(re.findall(r"\[(6\.\d+(?:\.\d+)?)\]", "\n".join(judged.lines)))))


def _loaded_for(launch, reading, script: str, loads: Environments) -> tuple[tuple[str, ...], object]:
    """The notes on the environment the script gives the launch, and what verl loads there
    (``None``: check's own environment holds), or an exit status when that cannot be found out."""
    from verl_rfpp.adapter import environment

    changed = environment.differs(launch.environment)
    if not changed:
        return (), None
    notes = tuple(f"note: the script runs main_ppo with {name}={value!r}"
                  + (f" ({script}:{reading.exported_at[name]})" if name in reading.exported_at else "")
                  for name, value in changed.items())
    key = tuple(sorted(changed.items(), key=str))
    if key not in loads.found:
        try:
            loads.found[key] = environment.loaded_in(launch.environment, platform_without_programs(),
                                                     loads.import_user_modules)
        except environment.EnvironmentUnknown as error:
            loads.found[key] = f"verl-rfpp check: cannot judge this run in the script's environment: {error}"
    if isinstance(loads.found[key], str):
        return (*notes, loads.found[key]), 2
    return notes, loads.found[key]


def _judge(run, loaded=None) -> Judged:
    """The verdict on one main_ppo command line (``scripts.MainPpoCommand``). A refusal with fixes
    carries the warnings the run gets once accepted with them (the run judged again with its fixes
    appended): what the user fixes first comes with what the accepted run will also say."""
    config_path, config_name, overrides = run.composition()
    judged = _judge_overrides(config_path, config_name, overrides, loaded)
    if judged.status != 1 or not judged.fixes:
        return judged
    fixed = _judge_overrides(config_path, config_name, [*overrides, *judged.fixes], loaded)
    warnings = fixed.lines[:-1] if fixed.status == 0 else ()
    return Judged(judged.status, (*warnings, *judged.lines), judged.fixes, judged.kl)


def _judge_overrides(config_path: Optional[str], config_name: Optional[str], overrides: Sequence[str],
                     loaded=None) -> Judged:
    """The verdict on main_ppo's config composed from ``overrides``. verl's Python is imported (in
    this process, as verl's ``main_ppo`` would) only when the installed distributions do not settle
    that verl runs our estimators (``loading.known_active``) or when the estimator's name reads as
    ours misspelt (verl's registry may hold it); composing needs only Hydra and verl's files."""
    from verl_rfpp.adapter import loading, verdict

    config = _composed(config_path, config_name, tuple(overrides))
    if isinstance(config, Exception):
        return Judged(3, (_composition_error(config, overrides),))
    known = not _asks_verls_registry(config) and loading.known_active()
    plugin_loaded = known
    if not known:
        platform_without_programs()
        plugin_loaded = loading.verl_loads_plugin()
    found = verdict.judge_config(config, plugin_loaded=plugin_loaded, known_active=known)
    if loaded is not None:
        found = _in_environment(found, loaded)
        unknown = _decided_by_user_code(found, loaded)
        if unknown:
            return Judged(2, (unknown,))
    unreadable = found.unread or (
        found.refusal if isinstance(found.refusal, validation.UnreadableConfigError) else None)
    if unreadable is not None:
        return Judged(found.status, (_unreadable_message(unreadable, overrides),))
    if found.refusal is not None:
        fixes = getattr(found.refusal, "fixes", None)
        return Judged(found.status, tuple(str(found.refusal).splitlines()), None if fixes is None else tuple(fixes))
    return Judged(found.status, (*(f"warning: {note}" for note in found.warnings), found.summary()), kl=found.kl)


_COMPOSITIONS: dict[tuple, object] = {}  # one check command's compositions (cleared when it ends)


def _composed(config_path: Optional[str], config_name: Optional[str], overrides: tuple[str, ...]):
    """verl's config composed from ``overrides`` (``compose.compose_verl_config``), or the error Hydra
    raised; once per command for each composition (a refusal, its fixes and the script read again
    with them compose the same runs)."""
    from verl_rfpp.adapter import compose

    key = (config_path, config_name, overrides)
    if key not in _COMPOSITIONS:
        try:
            _COMPOSITIONS[key] = compose.compose_verl_config(list(overrides), config_path, config_name)
        except ImportError:
            raise
        except Exception as error:  # noqa: BLE001 (Hydra raises ValueError, KeyError, ... besides its own types)
            _COMPOSITIONS[key] = error
    return _COMPOSITIONS[key]


def _asks_verls_registry(config) -> bool:
    """Whether the verdict reads verl's advantage registry: a name that reads as ours misspelt may
    be one verl (or a plugin) registers (``verdict._misspelt``)."""
    try:
        name = validation.estimator_name(config)
    except validation.UnreadableConfigError:
        return False
    return validation.estimator_of(config) is None and validation.misspelt_estimator(name) is not None


def platform_without_programs() -> str:
    """The name of verl's platform as verl 0.9.1 chooses it (``VERL_PLATFORM``, else the first
    registered platform torch finds available, else ``nvidia``) but without the probe that starts
    ``nvidia-smi`` / ``rocm-smi`` (``platform_manager._detect_platform_name``, reached when verl's
    ``constants_ppo`` is imported), set as ``VERL_PLATFORM`` so that verl, when it asks, asks no
    program: check starts none. Only in check's own process, for the check_command (``command`` restores
    it): a training run detects its platform as verl does."""
    from verl.plugin.platform import PlatformRegistry

    if not os.environ.get("VERL_PLATFORM", "").strip():
        os.environ["VERL_PLATFORM"] = next((name for name in PlatformRegistry.registered_names()
                                            if PlatformRegistry.get(name)().is_platform_available()), "nvidia")
    return os.environ["VERL_PLATFORM"].strip().lower()


@contextlib.contextmanager
def _own_platform_variable() -> Iterator[None]:
    """``VERL_PLATFORM`` as it was before the block (``platform_without_programs`` may set it)."""
    saved = os.environ.get("VERL_PLATFORM")
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("VERL_PLATFORM", None)
        else:
            os.environ["VERL_PLATFORM"] = saved


def _decided_by_user_code(found, loaded) -> str:
    """The exit-2 line when code the run imports and check did not (``loaded.not_imported``) decides
    the verdict: a name that reads as ours misspelt may be one those modules register (section
    6.3); a plugin on the script's PYTHONPATH, loaded with or after ours, may replace ours in verl's
    registry. ``""`` otherwise (the user's modules are imported before verl's plugins)."""
    plugins = [code for code in loaded.not_imported if not code.startswith("module ")]
    if isinstance(found.refusal, validation.MisspeltEstimatorError) and loaded.not_imported:
        what = f"whether {found.name!r} is an estimator that {', '.join(loaded.not_imported)} registers"
    elif found.estimator is not None and plugins:
        what = f"whether {', '.join(plugins)} leaves verl running verl-rfpp's {found.estimator}"
    else:
        return ""
    return (f"verl-rfpp check: {what} cannot be known without importing it; check imports the user's code a script "
            "names only when asked: verl-rfpp check --import-user-modules SCRIPT (its code then runs)")


def _in_environment(found, loaded):
    """``found`` as verl in the script's environment would have it (``loaded``: what it loads there)."""
    from verl_rfpp.adapter import verdict
    from verl_rfpp.errors import ActivationError

    if found.estimator is not None and not loaded.loaded:
        return verdict.Verdict(found.name, found.estimator, refusal=ActivationError(loaded.problems[found.estimator]))
    if isinstance(found.refusal, validation.MisspeltEstimatorError) and found.name in loaded.registered:
        return verdict.Verdict(found.name, None)
    return found


def _fix_endings(script: str, extra: Sequence[str], reading, runs: Sequence[Judged], loads: Environments) -> dict:
    """The closing lines of each refused run with fixes (by index). ``Fix: bash SCRIPT ARGUMENTS
    FIXES`` only when check has read the script again with those arguments and every run was then
    accepted with the KL it gets with the fixes on its main_ppo line (an accepted run: its own);
    otherwise why that command cannot work, found by reading the script with stand-in arguments,
    and the overrides to put at the end of each refused run's main_ppo line."""
    refused = {index: run.fixes for index, run in enumerate(runs) if run.status == 1 and run.fixes is not None}
    if not refused:
        return {}
    fixes = list(dict.fromkeys(fix for run_fixes in refused.values() for fix in run_fixes))
    shown = ("bash", script, *extra, *fixes)
    why = _command_fails(script, extra, fixes, reading, runs, refused, loads)
    if why is None:
        return {index: [validation.fix_line(fixes, ("bash", script, *extra))] for index in refused}
    note = f"note: `{shlex.join(shown)}` would not fix this: {why}"
    return {index: [note, f"Fix: put at the end of main_ppo's line ({reading.launches[index].place(script)}): "
                          + " ".join(shlex.quote(fix) for fix in run_fixes)]
            for index, run_fixes in refused.items()}


def _command_fails(script, extra, fixes, reading, runs, refused, loads) -> Optional[str]:
    """Why ``bash SCRIPT EXTRA FIXES`` does not make every run accepted with the KL it should keep
    (``None``: it does), from the script read again with those arguments."""
    from verl_rfpp.cli import scripts

    if any(run.status not in (0, 1) for run in runs):
        return "a run of the script is not judged (exit 2 or 3), so no command can be verified"
    expected = [_judge_launch(launch, reading, script, loads, refused[index]).kl if index in refused else run.kl
                for index, (launch, run) in enumerate(zip(reading.launches, runs, strict=True))]
    if any(index in refused and not kl for index, kl in enumerate(expected)):
        return "the fixes on main_ppo's line are not accepted either"
    try:
        again = scripts.read_script(Path(script), [*extra, *fixes])
    except scripts.ScriptError as error:
        return _with_stand_ins(f"read with them, {error}", script, extra, fixes, reading)
    if len(again.launches) != len(reading.launches):
        return _with_stand_ins(f"with them the script makes {len(again.launches)} runs instead of "
                               f"{len(reading.launches)}", script, extra, fixes, reading)
    for launch, kl in zip(again.launches, expected, strict=True):
        got = _judge_launch(launch, again, script, loads)
        if got.status != 0 or got.kl != kl:
            result = f"exit {got.status}" if got.status != 0 else f"KL: {got.kl or 'none'} instead of KL: {kl}"
            return _with_stand_ins(f"read with them, its run at {launch.place(script)} gets {result}", script, extra,
                                   fixes, reading)
    return None


def _with_stand_ins(found: str, script, extra, fixes, reading) -> str:
    """``found`` and, when the script reads appended arguments otherwise than appending them to main_ppo's
    arguments, how: found by reading it with as many stand-in arguments (``verl_rfpp_argument_K=1``)."""
    reasons = _stand_in_reasons(script, extra, len(fixes), reading, fixes)
    return f"{found} (read with stand-in arguments: {reasons})" if reasons else found


def _stand_in_reasons(script, extra, count, reading, fixes) -> str:
    """What the script does with ``count`` arguments appended after ``extra``, found by reading it with
    stand-ins in their place: where each lands in main_ppo's arguments (``""``: right at the end of
    every run's, as appended overrides need)."""
    from verl_rfpp.cli import scripts

    stand_ins = [f"verl_rfpp_argument_{number}=1" for number in range(1, count + 1)]
    try:
        probe = scripts.read_script(Path(script), [*extra, *stand_ins])
    except scripts.ScriptError:
        return ""
    if len(probe.launches) != len(reading.launches):
        return f"given {count} more argument(s), the script makes {len(probe.launches)} runs instead of " \
               f"{len(reading.launches)}"
    keys = {fix.split("=", 1)[0].lstrip("+~") for fix in fixes}
    reasons = []
    positions = [f"${len(extra) + number}" for number in range(1, count + 1)]
    for before, after in zip(reading.launches, probe.launches, strict=True):
        where, words = after.place(script), list(after.arguments)
        if words == [*before.arguments, *stand_ins]:
            continue
        whole = [stand_in for stand_in in stand_ins if stand_in in words]
        inside = [word for word in words if word not in stand_ins and any(stand_in in word for stand_in in stand_ins)]
        if not whole and not inside:
            reasons.append(f"main_ppo's line at {where} gets none of the command's {', '.join(positions)}")
            continue
        missing = [position for position, stand_in in zip(positions, stand_ins, strict=True) if stand_in not in whole]
        if missing:
            reasons.append(f"main_ppo's line at {where} does not get the command's {', '.join(missing)} as given")
        for word in inside:
            taken = [position for position, stand_in in zip(positions, stand_ins, strict=True) if stand_in in word]
            for position, stand_in in zip(positions, stand_ins, strict=True):
                word = word.replace(stand_in, f"<{position}>")
            reasons.append(f"the script makes `{word}` of the command's {', '.join(taken)} on main_ppo's line at "
                           f"{where}")
        kept = [word for word in after.arguments if not any(stand_in in word for stand_in in stand_ins)]
        dropped = [word for word in before.arguments if word not in kept]
        if dropped:
            reasons.append(f"with them, main_ppo's line at {where} loses {shlex.join(dropped)}, which it has without "
                           "them")
        if whole:
            later = [word for word in words[words.index(whole[-1]) + 1:]
                     if word.split("=", 1)[0].lstrip("+~") in keys]
            if later:
                reasons.append(f"the script's own {shlex.join(later)} comes after its arguments at {where}, and "
                               "main_ppo keeps the last value")
    return "; ".join(reasons)


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
