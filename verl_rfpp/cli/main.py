"""The ``verl-rfpp`` command line: demo, curves, doctor, check, recipe, bandit."""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from verl_rfpp import catalog, validation
from verl_rfpp.cli import arguments, quiet
from verl_rfpp.cli import check as checking


def _doctor(args: argparse.Namespace) -> int:
    """Report whether verl runs our estimators; exit 0 only if every piece is ours. verl's import-time
    messages are not shown (``-v``: shown; counted in one line when one is an error); ``--json``
    (what ``--ray`` reads back from each node) leaves them on stderr, to its caller, and prints the
    report as one line. Nothing of it remains in the temporary directory."""
    if args.ray is not None:
        return _doctor_cluster(args)
    from verl_rfpp.cli import doctor

    with quiet.scratch("doctor"), quiet.quiet("doctor", verbose=args.verbose or args.json, keep=False) as log:
        report = doctor.diagnose()
    if args.json:
        from verl_rfpp.cli import cluster_doctor

        print(cluster_doctor.to_json(report))
    else:
        _mention(log)
        print(doctor.render(report))
    return 0 if report.healthy else 1


def _doctor_cluster(args: argparse.Namespace) -> int:
    """``--ray``: the report of every alive node of a Ray cluster, one line per node (exit 2: no
    cluster at that address, in one line naming it)."""
    from verl_rfpp.cli import cluster_doctor

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
    """The line naming the command's log of other libraries' messages, when a line of it reads as an
    error (doctor prints it before its report: the verdict stays the last line); a log it does not
    name is removed."""
    if log.mention():
        print(log.mention())
    quiet.discard(log)


def _check(args: argparse.Namespace) -> int:
    """``verl-rfpp check``: ``verl_rfpp.cli.check`` reads and judges the runs, in a temporary
    directory of its own, removed at the end."""
    with quiet.scratch("check"):
        return checking.check_command(args.arguments, args.verbose, args.config_path, args.config_name,
                                     args.import_user_modules)


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
        report.run_experiments(out, quick=args.quick)
    print((out / "report.md").read_text())
    print(f"written: {out / 'results.json'}, {out / 'report.md'}, {out}/*.png")
    _mention(log)
    return 0


def _recipe(args: argparse.Namespace) -> int:
    """The recipe's overrides, one a line, from ``validation.RECIPES``; imports neither verl nor torch."""
    print("\n".join(validation.RECIPES[args.estimator]), flush=True)
    with quiet.scratch("recipe"), quiet.quiet("recipe", verbose=args.verbose, keep=False) as log:
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
    from verl_rfpp.cpu import checkpoints, demo
    from verl_rfpp.errors import LaunchError

    lock = None
    if args.out:  # one run per folder, held until this process ends (before Ray, before any file of the run)
        try:
            lock = checkpoints.hold_folder(args.out)
        except LaunchError as busy:
            print(f"verl-rfpp demo: {busy}.")
            return 2
    try:
        return _demo_in(args, demo, checkpoints)
    finally:
        if lock is not None:
            os.close(lock)


def _demo_in(args: argparse.Namespace, demo, checkpoints) -> int:
    """``_demo`` once the folder is the run's: the resume's checks, then the run; a SIGTERM (a
    scheduler's) stops it as a Ctrl-C does, and either ends in one line with the resume command."""
    import signal

    if args.resume:
        problem = checkpoints.resume_problem(args.out, args.steps, _run_settings(args))
        if problem:
            print(f"verl-rfpp demo: {problem}.")
            return 2
        note = checkpoints.resume_note(args.out)
        if note:
            print(f"verl-rfpp demo: {note}.")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="verl-rfpp-demo-"))
    keep = args.out is not None
    stopped_by = {"name": "SIGINT"}

    def terminated(number: int, frame: object) -> None:  # a scheduler's SIGTERM: stopped as a Ctrl-C is
        stopped_by["name"] = signal.Signals(number).name
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminated)
    private: list[str] = []
    try:
        private.extend(_private_caches(out))
        passed = _run_demo(args, out)
        keep = keep or not passed
        return 0 if passed else 1
    except KeyboardInterrupt:
        print(f"verl-rfpp demo: {demo.interrupted(args.out, args.steps, args.save_every, stopped_by['name'])}",
              flush=True)
        return 128 + getattr(signal, stopped_by["name"])
    finally:
        signal.signal(signal.SIGTERM, previous)
        for name in private:  # the process's own environment as it was (a caller's next run decides afresh)
            os.environ.pop(name, None)
        if not keep:
            shutil.rmtree(out, ignore_errors=True)


def _private_caches(out: Path) -> list[str]:
    """Torch's ``torchinductor_USER`` folder, which importing torch makes in the temporary directory
    (the demo imports it before its trainer, which has the run's TMPDIR), goes to the run's folder
    instead (contract section 6.5: nothing left behind; Ray's token is the run's own too:
    ``configuration.command``, ``cluster.LocalCluster``). A ``TORCHINDUCTOR_CACHE_DIR`` the user set
    is kept. The names of the variables it set, for the caller to remove when the run ends."""
    from verl_rfpp.cpu import configuration

    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return []
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(out / configuration.TEMP / "torchinductor")
    return ["TORCHINDUCTOR_CACHE_DIR"]


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
        from verl_rfpp.cli import multinode
        from verl_rfpp.cpu import assets, checkpoints, configuration, demo, launch, trace

        assets.build_all(out / "assets")
    if log.path:
        shutil.move(log.path, out / "messages.log")
    trainer = "legacy" if args.legacy else "v1"
    turns = ", multi-turn with a toy tool" if args.multi_turn else ""
    if args.nodes > 1:  # the multi-node example's run: its estimator, one rank per node
        args.estimator, args.ranks = configuration.MULTINODE_ESTIMATOR, args.nodes
        print(f"verl-rfpp demo: examples/{configuration.MULTINODE_EXAMPLE} on a Ray cluster of {args.nodes} nodes on "
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

    trained = args.steps - (checkpoints.saved_step(out) or 0) if args.resume else args.steps  # this run's steps
    if args.save_every:
        checkpoints.write_run_settings(out, settings)
    example = multinode.example_overrides(args.nodes) if args.nodes > 1 else ()
    try:
        result = launch.run(args.estimator, out, steps=args.steps, legacy=args.legacy, echo=args.verbose,
                            ranks=args.ranks, seed=args.seed, multi_turn=args.multi_turn, on_step=on_step,
                            nodes=args.nodes, save_every=args.save_every, resume=args.resume, example=example)
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
                f"{out / trace.TRACE_FILE}{messages}")
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
        from verl_rfpp.experiments import report, runs
        from verl_rfpp.experiments.noisy import command as noisy
        from verl_rfpp.experiments.noisy import task as noisy_task

        problem = noisy.noisy_problem(args) if args.task == "noisy" else runs.problem(args.methods)
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
        return noisy.noisy_command(args, echo=lambda line: print(line, flush=True))
    methods = [m for m in runs.METHODS if not args.methods or m.key in args.methods]
    print(f"verl-rfpp curves: {len(methods)} methods x {args.seeds} seeds x {args.steps} steps of verl's "
          f"trainer on the CPU; runs in {out / 'runs'}", flush=True)
    records = runs.run_all(out, args.steps, args.seeds, tuple(methods), progress=lambda line: print(line, flush=True))
    report.write_report(out, records, args.steps)
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
    from verl_rfpp.experiments.noisy import task as noisy_task  # the task's designs (standard library only)

    parser = arguments.Parser(prog="verl-rfpp", description=__doc__.replace("``", ""),
                              usage="verl-rfpp [-h] [--version] COMMAND ...")
    parser.add_argument("--version", action=_Version, help="print verl-rfpp's and verl's versions and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", prog="verl-rfpp", parser_class=arguments.Parser)
    demo = commands.add_parser("demo", help=COMMANDS["demo"], formatter_class=arguments.HelpFormatter)
    demo.add_argument("--estimator", choices=catalog.names(), default=catalog.REINFORCE_PLUS_PLUS_BASELINE.name,
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
    curves.add_argument("--optimizer", choices=tuple(noisy_task.OPTIMIZERS), default="adamw",
                        help="--task noisy: the actor's optimizer (sgd: plain SGD, weight decay 0, the bandit's "
                             "update; its default lr the design's sgd_lr, 0.15 separate)")
    curves.add_argument("--quick", action="store_true",
                        help="--task noisy: a smoke run (1 step, 1 seed, our REINFORCE++-baseline unless --methods)")
    curves.add_argument("--control", type=int, default=0, metavar="SEEDS",
                        help="--task noisy: also run the design's control methods noise-free, this many seeds "
                             "(separate: GRPO and both REINFORCE++-baselines; shared: GRPO and ours)")
    curves.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    curves.set_defaults(handler=_curves)
    doctor = commands.add_parser(
        "doctor", help=COMMANDS["doctor"], formatter_class=arguments.HelpFormatter,
        description="Check that verl runs verl-rfpp's estimators here. It costs what verl costs: it imports verl\n"
                    "as a training run does (which loads the plugin: most of its time), then every verl module a\n"
                    "patch waits for (the hook lines), then compiles and runs the CPU kernels; in a checkout,\n"
                    "python benchmarks/bench_check.py prints what each part costs. verl-rfpp check asks the\n"
                    "installed packages instead, where they settle it.")
    doctor.add_argument("--ray", metavar="ADDRESS",
                        help="check every node of the Ray cluster at ADDRESS (as ray.init takes it: auto, "
                             "HEAD:6379, ...) in a fresh process on each node (default: this machine only)")
    doctor.add_argument("--json", action="store_true", help="the report as one JSON line (what --ray reads back)")
    doctor.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    doctor.set_defaults(handler=_doctor)
    check = commands.add_parser(
        "check", help=COMMANDS["check"],
        usage=("verl-rfpp check [-h] [-v] [-cp DIR] [-cn NAME] [OVERRIDES ...]\n"
               "       verl-rfpp check [-h] [-v] [--import-user-modules] SCRIPT [ARGUMENTS ...]"),
        epilog=checking.HELP, formatter_class=arguments.HelpFormatter)
    check.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    check.add_argument("-cp", "--config-path",
                       help="main_ppo's --config-path (relative to verl/trainer, as Hydra reads it; default: config)")
    check.add_argument("-cn", "--config-name", help="main_ppo's --config-name (default ppo_trainer)")
    check.add_argument("--import-user-modules", action="store_true",
                       help="let the child python that judges a run in the script's environment import the user's "
                            "modules the script names (VERL_USE_EXTERNAL_MODULES, verl plugins on its PYTHONPATH): "
                            "their code runs (default: not imported; a verdict they decide is exit 2)")
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
    recipe.add_argument("estimator", choices=catalog.names(), metavar="ESTIMATOR",
                        help=f"one of {', '.join(catalog.names())}")
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

