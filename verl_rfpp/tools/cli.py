"""The ``verl-rfpp`` command line: demo, curves, doctor, check, recipe, bandit."""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from verl_rfpp.contract import validation
from verl_rfpp.tools import arguments, quiet


def _doctor(args: argparse.Namespace) -> int:
    """Report whether verl runs our estimators; exit 0 only if every piece is ours. verl's import-time
    messages go to the command's log; ``--json`` (what ``--ray`` reads back from each node) leaves
    them on stderr, to its caller, and prints the report as one line."""
    if args.ray is not None:
        return _doctor_cluster(args)
    from verl_rfpp.tools import doctor

    with quiet.quiet("doctor", verbose=args.verbose or args.json) as log:
        report = doctor.report()
    if args.json:
        from verl_rfpp.tools import cluster_doctor

        print(cluster_doctor.to_json(report))
    else:
        _mention(log)
        print(doctor.render(report))
    return 0 if report.healthy else 1


def _doctor_cluster(args: argparse.Namespace) -> int:
    """``--ray``: the report of every alive node of a Ray cluster, one line per node (exit 2: no
    cluster at that address, in one line naming it)."""
    from verl_rfpp.tools import cluster_doctor

    with quiet.quiet("doctor", verbose=args.verbose) as log:
        try:
            found = cluster_doctor.check(args.ray)
        except cluster_doctor.AddressError as error:
            print(error)
            return 2
    _mention(log)
    print(found.render())
    return 0 if found.healthy else 1


def _mention(log: quiet.QuietLog) -> None:
    """The line naming the command's log of other libraries' messages, when there is one (doctor
    prints it before its report: the verdict stays the last line)."""
    if log.mention():
        print(log.mention())


CHECK_HELP = """SCRIPT: a bash launch script that starts python -m verl.trainer.main_ppo. It is read, never
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


def _check(args: argparse.Namespace) -> int:
    """Read the runs (a script's main_ppo launches, or overrides), compose verl's config as main_ppo
    would, and print ``verdict.judge``'s verdict for each; the worst exit status."""
    from verl_rfpp.tools import scripts

    words = list(args.arguments)
    try:
        script = bool(words) and scripts.is_script(words[0])
    except scripts.ScriptError as error:
        print(f"verl-rfpp check: {error}")
        return 2
    if script and (args.config_path or args.config_name):
        print("verl-rfpp check: --config-path/--config-name belong on the script's main_ppo line")
        return 2
    if not script:
        return _check_overrides(args, words)
    extra = words[1:]
    try:
        reading = scripts.read_script(Path(words[0]), extra)
    except scripts.ScriptError as error:
        print(f"verl-rfpp check: {error}")
        return 2
    for assumption in reading.assumptions:
        print(f"assumed: {assumption}")
    command = ("bash", words[0], *extra)
    statuses, verdicts = [], io.StringIO()
    with quiet.quiet("check", verbose=args.verbose) as log, contextlib.redirect_stdout(verdicts):
        for number, launch in enumerate(reading.launches, 1):
            if len(reading.launches) > 1:
                print(f"run {number} of {len(reading.launches)} ({words[0]}:{launch.line}): {launch.launcher}")
            statuses.append(_check_launch(launch, reading, words[0], command))
    _print_after(log, verdicts.getvalue())
    return max(statuses, key=WORST_FIRST[::-1].index)


WORST_FIRST = (2, 3, 1, 0)  # several runs: the exit status is the worst (2: a run check cannot judge)


def _check_overrides(args: argparse.Namespace, words: list) -> int:
    """``check [-cp DIR] [-cn NAME] OVERRIDES``: one verdict on the overrides."""
    config_path, config_name, overrides = args.config_path, args.config_name, []
    while words:
        word = words.pop(0)
        flag, equals, value = word.partition("=")
        if flag in ("-cp", "--config-path", "-cn", "--config-name"):
            if not equals and not words:
                print(f"verl-rfpp check: {flag} needs a value")
                return 2
            value = value if equals else words.pop(0)
            if flag in ("-cp", "--config-path"):
                config_path = value
            else:
                config_name = value
        elif word in ("-v", "--verbose"):
            args.verbose = True
        elif word.startswith("-"):
            print(f"verl-rfpp check: unknown option {word!r}: check takes -v, -cp DIR, -cn NAME and main_ppo's "
                  "overrides, or SCRIPT [ARGUMENTS...] (see verl-rfpp check --help)")
            return 2
        else:
            overrides.append(word)
    with quiet.quiet("check", verbose=args.verbose) as log:
        status, lines = _judge(overrides, config_path, config_name)
    _print_after(log, "\n".join(lines) + "\n")
    return status


def _print_after(log, verdicts: str) -> None:
    """The line naming check's log of other libraries' messages (when anything went there), then
    the verdicts: a refusal's ``Fix:`` stays the last line."""
    _mention(log)
    print(verdicts, end="")


def _check_launch(launch, reading, script: str, command: tuple) -> int:
    """One run of a script: its overrides judged in the environment the script gives it. A value the
    reading cannot know is judged as two different stand-ins: the same verdict, or exit 2."""
    from verl_rfpp.tools import scripts

    try:
        run = scripts.parse_main_ppo(launch.known("unknown"))
    except scripts.ScriptError as error:
        print(f"verl-rfpp check: {script}:{launch.line}: {error}")
        return 2
    loaded = _loaded_for(launch, reading, script)
    if isinstance(loaded, int):
        return loaded
    config_path, overrides = _config_dir(run)
    status, lines = _judge(overrides, config_path, run.config_name, command, launch.forwards, loaded)
    unknowns = launch.unknown_parts()
    if unknowns:
        other = _judge(_config_dir(scripts.parse_main_ppo(launch.known("other")))[1], config_path, run.config_name,
                       command, launch.forwards, loaded)
        if other != (status, [line.replace("unknown", "other") for line in lines]):
            where = "; ".join(f"{script}:{line}: {construct}" for line, construct in unknowns)
            print(f"verl-rfpp check: the verdict depends on a value check cannot know without running something "
                  f"({where}); {scripts.WAY_OUT}")
            return 2
        for line, construct in unknowns:
            print(f"assumed: {script}:{line}: `{construct}` is not known without running it; it reaches only "
                  "settings the verdict does not read")
    print("\n".join(lines))
    return status


def _config_dir(run) -> tuple:
    """main_ppo's ``--config-dir DIR`` as Hydra reads it: DIR searched besides verl's own config
    directory (the primary config from DIR when it is there). The config path and the overrides."""
    name = run.config_name or "ppo_trainer"
    if run.config_path or not run.config_dir or not (
            Path(run.config_dir) / (name if name.endswith(".yaml") else f"{name}.yaml")).is_file():
        return run.config_path, list(run.overrides)
    return os.path.abspath(run.config_dir), ["hydra.searchpath=[pkg://verl.trainer.config]", *run.overrides]


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
           command: Sequence[str] = (), forwards: bool = True, loaded=None) -> tuple[int, list]:
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
        return found.status, _refusal_lines(found.refusal, command, forwards)
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


def _refusal_lines(refusal: Exception, command: Sequence[str], forwards: bool) -> list:
    """The refusal; its closing ``Fix:`` line, for a script, is the script's command with the fixes."""
    lines = str(refusal).splitlines()
    fixes = getattr(refusal, "fixes", None)
    if fixes is None or not command:
        return lines
    lines = lines[:-1]
    if not forwards:
        lines.append(f'note: {command[1]} does not pass its own arguments on to main_ppo (no "$@" at the end of its '
                     'main_ppo line): put these overrides at the end of that line, or end it with "$@" and run the '
                     "Fix command")
    return lines + [validation.fix_line(list(fixes), tuple(command))]


def _bandit(args: argparse.Namespace) -> int:
    """Run the toy experiments; write results.json, PNG plots and report.md into --out."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("verl-rfpp bandit draws plots with matplotlib: pip install 'verl-rfpp[bandit]'")
        return 2
    with quiet.quiet("bandit", verbose=args.verbose) as log:
        import verl  # noqa: F401  (loads the plugin: advantages come from verl's registry)

        from verl_rfpp.bandit import report

        out = Path(args.out)
        report.run(out, quick=args.quick)
    print((out / "report.md").read_text())
    print(f"written: {out / 'results.json'}, {out / 'report.md'}, {out}/*.png")
    _mention(log)
    return 0


def _recipe(args: argparse.Namespace) -> int:
    """The recipe's overrides, one a line, from ``validation.RECIPES``; imports neither verl nor torch."""
    print("\n".join(validation.RECIPES[args.estimator]), flush=True)
    with quiet.quiet("recipe", verbose=args.verbose) as log:
        problem = _no_loader_problem()
    # on stderr: $(verl-rfpp recipe NAME) still gets only the overrides
    for line in [f"verl-rfpp recipe: {problem}." if problem else "", log.mention()]:
        if line:
            print(line, file=sys.stderr)
    return 0


def _no_loader_problem() -> Optional[str]:
    """Why the installed verl never loads the plugin (no entry-point loader), or ``None``; read
    from the installed metadata, without importing verl."""
    from importlib import metadata

    from verl_rfpp.adapter.versions import no_loader_problem

    try:
        return no_loader_problem(metadata.version("verl"))
    except metadata.PackageNotFoundError:
        return "verl is not installed in this environment. Fix: pip install 'verl>=0.9.0'"


# The modules of the [cpu] extra (pyproject.toml): verl 0.9.1's trainers import them undeclared.
CPU_EXTRA_MODULES = ("cachetools", "fastapi", "uvicorn", "transfer_queue", "zmq", "msgspec")


def _missing_modules(names: Sequence[str]) -> list[str]:
    """The modules among ``names`` that cannot be imported (found without importing them)."""
    import importlib.util

    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def _demo(args: argparse.Namespace) -> int:
    """Train the tiny local model for a few steps inside verl's real trainer, on the CPU. Its files go
    to ``--out``, else to a temporary folder that is removed at the end (kept, and named, on a FAIL)."""
    problem = _no_loader_problem()
    if problem is not None:
        print(f"verl-rfpp demo: {problem}.")
        return 2
    missing = _missing_modules(CPU_EXTRA_MODULES)
    if missing:
        print(f"verl-rfpp demo runs verl's trainer, which needs modules of the [cpu] extra that are not "
              f"installed ({', '.join(missing)}): pip install 'verl-rfpp[cpu]'")
        return 2
    if args.resume and not args.out:
        print("verl-rfpp demo: --resume continues the run in --out DIR; give the --out of the run that saved "
              "with --save-every N.")
        return 2
    if args.resume:
        from verl_rfpp.cpu.launch import resume_problem

        problem = resume_problem(args.out, args.steps, _run_settings(args))
        if problem:
            print(f"verl-rfpp demo: {problem}.")
            return 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="verl-rfpp-demo-"))
    keep = args.out is not None
    try:
        passed = _run_demo(args, out)
        keep = keep or not passed
        return 0 if passed else 1
    finally:
        if not keep:
            shutil.rmtree(out, ignore_errors=True)


UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT)  # an --out the demo cannot write


def _run_settings(args: argparse.Namespace) -> dict:
    """The demo's options that decide its run (what a resumed run must share with the one that saved)."""
    return {"--estimator": args.estimator, "--legacy": args.legacy, "--ranks": args.ranks, "--nodes": args.nodes,
            "--seed": args.seed, "--multi-turn": args.multi_turn}


def _run_demo(args: argparse.Namespace, out: Path) -> bool:
    """The demo's run in ``out``, its progress lines and summary; whether every check held."""
    settings = _run_settings(args)  # as given (several nodes change the estimator and ranks below)
    # Importing verl (the CPU backend) and building the assets print warnings and progress that
    # mean nothing to a reader: they go to messages.log in ``out`` (--verbose: to the terminal).
    with quiet.quiet("demo", verbose=args.verbose, stdout=True) as log:
        from verl_rfpp.cpu import assets, demo, launch

        assets.build_all(out / "assets")
    if log.path:
        shutil.move(log.path, out / "messages.log")
    trainer = "legacy" if args.legacy else "v1"
    turns = ", multi-turn with a toy tool" if args.multi_turn else ""
    if args.nodes > 1:  # the multi-node example's run: its estimator, one rank per node
        args.estimator, args.ranks = launch.MULTINODE_ESTIMATOR, args.nodes
        print(f"verl-rfpp demo: examples/{launch.MULTINODE_EXAMPLE} on a Ray cluster of {args.nodes} nodes on "
              f"this machine (loopback), one rank per node.", flush=True)
    where = f"Files in {out}" if args.out else "Files in a temporary folder, removed at the end (--out DIR keeps them)"
    print(f"verl-rfpp demo: {args.estimator} in verl's {trainer} trainer, {args.ranks} "
          f"rank{'s' if args.ranks > 1 else ''}, {args.steps} steps{turns}, on the CPU. {where}.", flush=True)
    if not args.verbose:
        print("Starting verl (Ray, workers, model) takes a minute or two; --verbose shows verl's own log "
              "here...", flush=True)

    def on_step(step: int, metrics: dict) -> None:
        if not args.verbose:
            print(demo.progress_line(step, args.steps, metrics), flush=True)

    trained = args.steps - (launch.saved_step(out) or 0) if args.resume else args.steps  # this run's steps
    if args.save_every:
        launch.write_run_settings(out, settings)
    try:
        result = launch.run(args.estimator, out, steps=args.steps, legacy=args.legacy, echo=args.verbose,
                            ranks=args.ranks, seed=args.seed, multi_turn=args.multi_turn, on_step=on_step,
                            nodes=args.nodes, save_every=args.save_every, resume=args.resume)
    except OSError as error:  # --out became unwritable (read-only, full) while the run wrote its files
        if error.errno not in UNWRITABLE:
            raise
        print(f"verl-rfpp demo: could not write the run's files in {out}: {error}", flush=True)
        return False
    unsaved = demo.checkpoint_failure(result, out)
    if unsaved:
        print(f"verl-rfpp demo: {unsaved}", flush=True)
        return False
    verdict = demo.judge(args.estimator, result, trained, args.ranks)
    if args.nodes > 1:
        demo.judge_nodes(result, args.nodes, verdict)
    if verdict.problems and not args.verbose:
        print("".join(result.log[-25:]).rstrip())
    if args.out or verdict.problems:
        messages = f"; other libraries' messages: {out / 'messages.log'}" if (out / "messages.log").exists() else ""
        kept = "" if args.out else f"The run's files are kept in {out}: "
        hint = (f"{kept}verl's full log: {result.log_path}; the run trace (who computed what, where): "
                f"{out / 'trace.txt'}{messages}")
    else:
        hint = ("The run's files (verl's log, the run trace) were in a temporary folder, now removed: "
                "--out DIR keeps them")
    print(demo.summary(args.estimator, result, verdict, trained, args.ranks, args.legacy, hint,
                       files_kept=bool(args.out or verdict.problems)))
    return verdict.passed


def _curves(args: argparse.Namespace) -> int:
    """Train ours, verl's built-ins and grpo on the demo task; plots and report.md into --out."""
    missing = _missing_modules(CPU_EXTRA_MODULES + ("matplotlib", "tensorboard"))
    if missing:
        print(f"verl-rfpp curves needs modules that are not installed ({', '.join(missing)}): "
              "pip install 'verl-rfpp[cpu,curves]'")
        return 2
    out = Path(args.out)
    # verl's import-time messages, and transformers' progress bars and warnings while the tiny
    # models are built, go to the log (--verbose: to the terminal); the runs reuse the builds
    with quiet.quiet("curves", verbose=args.verbose, stdout=True) as log:
        from verl_rfpp.cpu import assets
        from verl_rfpp.curves import noisy, noisy_task, report, runs

        problem = noisy.problem(args) if args.task == "noisy" else runs.problem(args.methods)
        if problem is None and args.task == "noisy":
            design = noisy_task.DESIGNS[args.design]
            noisy_task.build_assets(noisy.assets_dir(out, design), design)
            assets.build_all(out / "assets" / "demo")
        elif problem is None:
            assets.build_all(out / "assets")
    _mention(log)
    if problem:
        print(problem)
        return 2
    if args.task == "noisy":
        return noisy.command(args, echo=lambda line: print(line, flush=True))
    methods = [m for m in runs.METHODS if not args.methods or m.key in args.methods]
    print(f"verl-rfpp curves: {len(methods)} methods x {args.seeds} seeds x {args.steps} steps of verl's "
          f"trainer on the CPU; runs in {out / 'runs'}", flush=True)
    records = runs.run_all(out, args.steps, args.seeds, tuple(methods), progress=lambda line: print(line, flush=True))
    report.write(out, records, args.steps)
    print((out / "report.md").read_text())
    print(f"written: {out / 'report.md'}, {out / 'results.json'}, {out}/*.png")
    return 0


COMMANDS = {
    "demo": "train a tiny local model with verl's real trainer on the CPU",
    "curves": "learning curves: ours vs verl's built-ins and grpo (long)",
    "doctor": "check that verl runs verl-rfpp's estimators",
    "check": "validate a launch script (read, never run) or Hydra overrides against the contract",
    "bandit": "CPU toy experiments on REINFORCE++'s claims",
    "recipe": "print the validated recipe's overrides",
}
VERBOSE_HELP = "show other libraries' messages (verl's warnings) on the terminal"
INTERRUPTED = {"demo": "stopped the trainer and its Ray processes",
               "curves": "stopped the trainer and its Ray processes"}


class _Version(argparse.Action):
    """``--version``: verl-rfpp's and verl's installed versions, from the metadata (no verl import)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from importlib import metadata

        def installed(name: str) -> str:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                return "not installed"

        print(f"verl-rfpp {installed('verl-rfpp')} (verl {installed('verl')}, Python {sys.version.split()[0]})")
        parser.exit()


def _overview(parser: argparse.ArgumentParser) -> str:
    """What a bare ``verl-rfpp`` prints: the usage and each command in one line."""
    width = max(map(len, COMMANDS))
    return "\n".join([parser.format_usage().rstrip(), "", "commands:",
                      *(f"  {name:<{width}}  {text}" for name, text in COMMANDS.items()), "",
                      "verl-rfpp COMMAND --help: the command's options; verl-rfpp --version: the versions installed"])


def build_parser() -> argparse.ArgumentParser:
    from verl_rfpp.curves import noisy_task  # the task's designs (standard library only)

    parser = arguments.Parser(prog="verl-rfpp", description=__doc__.replace("``", ""),
                              usage="verl-rfpp [-h] [--version] COMMAND ...")
    parser.add_argument("--version", action=_Version, help="print verl-rfpp's and verl's versions and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", prog="verl-rfpp", parser_class=arguments.Parser)
    demo = commands.add_parser("demo", help=COMMANDS["demo"], formatter_class=arguments.HelpFormatter)
    demo.add_argument("--estimator", choices=validation.ESTIMATOR_NAMES, default="reinforce_plus_plus_baseline",
                      help="the estimator the run uses, with its validated recipe")
    demo.add_argument("--legacy", action="store_true", help="verl's legacy trainer instead of v1")
    demo.add_argument("--steps", type=int, default=3, action=arguments.Positive,
                      fix="train at least 1 step (the default is 3)", help="training steps (40 show learning)")
    demo.add_argument("--ranks", type=int, default=1, choices=(1, 2),
                      help="FSDP ranks: training processes sharing each batch (gloo)")
    demo.add_argument("--nodes", type=int, default=1, action=arguments.Positive,
                      fix="a cluster has at least 1 node; use 1 (one Ray node) or 2",
                      help="N >= 2: a Ray cluster of N nodes on this machine (loopback), one rank per node, running "
                           "the overrides of examples/run_qwen2.5-7b_gsm8k_rfpp_baseline_multinode.sh")
    demo.add_argument("--seed", type=int, default=0, help="data order and sampling seed")
    demo.add_argument("--multi-turn", action="store_true",
                      help="verl's tool_agent loop with a toy tool: responses with tool tokens inside")
    demo.add_argument("-v", "--verbose", action="store_true",
                      help=f"{VERBOSE_HELP}, and stream verl's own log instead of progress lines")
    demo.add_argument("--save-every", type=int, action=arguments.Positive, metavar="N",
                      fix="save a checkpoint every N >= 1 steps",
                      help="save verl's checkpoint every N steps and at the last, in --out DIR/checkpoints "
                           "(default: none)")
    demo.add_argument("--resume", action="store_true",
                      help="continue the run in --out DIR from its latest checkpoint up to --steps "
                           "(default: a fresh run)")
    demo.add_argument("--out", action=arguments.OutputDirectory,
                      help="directory for the assets and logs, kept (default: a temporary one, removed at the end "
                           "unless the run fails)")
    demo.set_defaults(handler=_demo)
    curves = commands.add_parser("curves", help=COMMANDS["curves"], formatter_class=arguments.HelpFormatter)
    curves.add_argument("--out", required=True, action=arguments.OutputDirectory,
                        help="output directory (finished runs in it are reused)")
    curves.add_argument("--steps", type=int, default=40, action=arguments.Positive, fix="train at least 1 step",
                        help="training steps of each run")
    curves.add_argument("--seeds", type=int, default=3, action=arguments.Positive, fix="run at least 1 seed",
                        help="seeds of each method")
    curves.add_argument("--methods", nargs="*", help="method keys: ours_baseline verl_baseline ours_rfpp "
                        "verl_rfpp verl_grpo (default: all five; --task noisy: the design's, docs/curves/noisy)")
    curves.add_argument("--task", choices=("demo", "noisy"), default="demo",
                        help="noisy: noisy rewards, half the prompts with nothing to learn (docs/curves/noisy)")
    curves.add_argument("--design", choices=tuple(noisy_task.DESIGNS), default=noisy_task.SEPARATE.key,
                        help="--task noisy: separate: each prompt one token of its own, untied embeddings, 16 "
                             "prompts x 16 samples a step; shared: prompts of two shared tokens, tied embeddings, "
                             "4 x 4 (docs/curves/noisy)")
    curves.add_argument("--lrs", type=float, nargs="*",
                        help="--task noisy: learning rates (default: the design's, 5e-3 separate, 1e-2 shared)")
    curves.add_argument("--noise-std", type=float, default=0.1, help="--task noisy: reward noise std")
    curves.add_argument("--quick", action="store_true",
                        help="--task noisy: a smoke run (1 step, 1 seed, our REINFORCE++-baseline unless --methods)")
    curves.add_argument("--control", type=int, default=0, metavar="SEEDS",
                        help="--task noisy: also run the design's control methods noise-free, this many seeds "
                             "(separate: GRPO and both REINFORCE++-baselines; shared: GRPO and ours)")
    curves.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    curves.set_defaults(handler=_curves)
    doctor = commands.add_parser("doctor", help=COMMANDS["doctor"], formatter_class=arguments.HelpFormatter)
    doctor.add_argument("--ray", metavar="ADDRESS",
                        help="check every node of the Ray cluster at ADDRESS (as ray.init takes it: auto, "
                             "HEAD:6379, ...) in a fresh process on each node (default: this machine only)")
    doctor.add_argument("--json", action="store_true", help="the report as one JSON line (what --ray reads back)")
    doctor.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    doctor.set_defaults(handler=_doctor)
    check = commands.add_parser(
        "check", help=COMMANDS["check"],
        usage=("verl-rfpp check [-h] [-v] [-cp DIR] [-cn NAME] [OVERRIDES ...]\n"
               "       verl-rfpp check [-h] [-v] SCRIPT [ARGUMENTS ...]"),
        epilog=CHECK_HELP, formatter_class=arguments.HelpFormatter)
    check.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    check.add_argument("-cp", "--config-path",
                       help="main_ppo's --config-path (relative to verl/trainer, as Hydra reads it; default: config)")
    check.add_argument("-cn", "--config-name", help="main_ppo's --config-name (default ppo_trainer)")
    check.add_argument("arguments", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGUMENTS] | OVERRIDES",
                       help="a launch script and its own arguments (every word after it), or Hydra overrides "
                            "as given to main_ppo")
    check.set_defaults(handler=_check)
    bandit = commands.add_parser("bandit", help=COMMANDS["bandit"], formatter_class=arguments.HelpFormatter)
    bandit.add_argument("--out", required=True, action=arguments.OutputDirectory, help="output directory")
    bandit.add_argument("--quick", action="store_true", help="a smaller run (under a minute)")
    bandit.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    bandit.set_defaults(handler=_bandit)
    recipe = commands.add_parser("recipe", help=COMMANDS["recipe"], formatter_class=arguments.HelpFormatter)
    recipe.add_argument("estimator", choices=validation.ESTIMATOR_NAMES, metavar="ESTIMATOR",
                        help=f"one of {', '.join(validation.ESTIMATOR_NAMES)}")
    recipe.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    recipe.set_defaults(handler=_recipe)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command's exit status; Ctrl-C is one line and 130, after the command stopped what it started."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, --version, or an argument refused in one line (arguments.Parser)
        return stop.code
    if args.command is None:
        print(_overview(parser))
        return 2
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        stopped = INTERRUPTED.get(args.command)
        print(f"verl-rfpp {args.command}: interrupted" + (f"; {stopped}" if stopped else ""), flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
