"""``verl-rfpp curves --task noisy``: run (or reuse) every lr x seed x method of the noisy-reward
task in verl's real trainer (``noisy.runs``), then write what every run finished in ``--out``
shows (``noisy.analysis``) as results.json, plots and report.md (``noisy.report``)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from verl_rfpp.experiments.noisy import report as noisy_report
from verl_rfpp.experiments.noisy import task as noisy_task
from verl_rfpp.experiments.noisy.runs import assets_dir, finished, methods_of, train_all
from verl_rfpp.experiments.runs import problem as method_problem

__all__ = ["QUICK", "assets_dir", "noisy_command", "noisy_problem"]

QUICK = {"steps": 1, "seeds": 1, "methods": ("ours_baseline",)}  # a smoke run: one update, probed after it


def noisy_problem(args) -> Optional[str]:
    """Why ``curves --task noisy`` refuses these arguments (unknown methods, no learning rate for
    the optimizer, a learning rate not above 0, a negative noise std), or None."""
    if unknown := method_problem(args.methods):
        return unknown
    design = noisy_task.DESIGNS[args.design]
    if not args.lrs and design.lr_of(args.optimizer) is None:
        return (f"verl-rfpp curves --task noisy: design {design.key} has no chosen --optimizer {args.optimizer} "
                "learning rate; give one with --lrs")
    lrs = tuple(args.lrs) if args.lrs else (design.lr_of(args.optimizer),)
    if not (lrs and all(lr > 0 for lr in lrs) and args.noise_std >= 0):  # --steps, --seeds: at parse time
        return (f"verl-rfpp curves --task noisy: every --lrs value {list(lrs)} must be positive and --noise-std "
                f"{args.noise_std} non-negative")
    return None


def noisy_command(args, echo: Callable[[str], None]) -> int:
    """``verl-rfpp curves --task noisy`` (arguments ``problem`` accepts): run (or reuse) every lr x
    seed x method, and with ``--control`` the same methods noise-free (the design's control methods
    unless ``--methods``), then write results.json, the plots and report.md into ``--out`` over
    every run finished there with these steps, lrs and noise levels (so a second command with more
    seeds of some methods adds to the first's). ``--quick``: 1 step, 1 seed, our
    REINFORCE++-baseline unless ``--methods`` says otherwise."""
    out, design = Path(args.out), noisy_task.DESIGNS[args.design]
    methods = methods_of(tuple(args.methods) if args.methods else QUICK["methods"] if args.quick else design.methods)
    steps, seeds = (QUICK["steps"], QUICK["seeds"]) if args.quick else (args.steps, args.seeds)
    optimizer = args.optimizer
    lrs = tuple(args.lrs) if args.lrs else (design.lr_of(optimizer),)
    echo(f"verl-rfpp curves --task noisy --design {design.key}: {len(methods)} methods x {seeds} seeds x {steps} "
         f"steps x {optimizer} lr {', '.join(f'{lr:g}' for lr in lrs)}, reward noise std {args.noise_std:g}; "
         f"runs in {out / 'runs'}")
    train_all(out, design, steps, seeds, lrs, methods, args.noise_std, progress=echo, optimizer=optimizer)
    control: tuple[dict, ...] = ()
    if args.control:
        train_all(out, design, steps, args.control, lrs,
                methods if args.methods else methods_of(design.control_methods), 0.0, progress=echo,
                optimizer=optimizer)
        control = tuple(finished(out, design, steps, lrs, 0.0, optimizer))
    spec = noisy_task.build_assets(assets_dir(out, design), design)
    noisy_report.write_noisy_report(out, finished(out, design, steps, lrs, args.noise_std, optimizer), spec,
                                    control=control)
    report_md, results_json = (out / noisy_report.output_name(design.key, name, optimizer)
                               for name in ("report.md", "results.json"))
    echo(report_md.read_text())
    echo(f"written: {report_md}, {results_json}, "
         f"{out}/{noisy_report.output_name(design.key, 'nois*_lr*.png', optimizer)}")
    return 0
