"""The SGD arm at each method's own rate (issue 52): the criterion that sets GRPO's rate, the runs
it plans, and the runner that makes them one at a time and records each finished run where
``noisy.runs.restore`` continues from.

The criterion, stated and committed before any run at the new rate: under SGD a step scales with
lr x advantage, and the two methods' informative advantages differ in scale (the baseline divides
by one std over a batch half of whose rows, the flat prompts, are near 0). Our REINFORCE++-baseline
keeps the design's SGD rate (``Design.sgd_lr``, 0.15: its committed runs are reused, same config,
same seeds, deterministic); GRPO gets the rate that equalizes the informative advantages' rms:
``sgd_lr x rms_ours / rms_grpo``, rounded to two significant digits, each rms the mean over seeds of
a run's mean over steps of ``noisy/informative_adv_rms`` in the committed noise-free shared-rate
runs (docs/curves/noisy/sgd-results.json, ``control_summary``). Nothing of a noisy run enters it.

Run: ``python -m verl_rfpp.experiments.noisy.plan --out DIR --record docs/curves/noisy/sgd-own-rate-runs.json``
(again after a stop: the runs in the record are restored into DIR and not run again)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Callable, Optional

from verl_rfpp.experiments.noisy import task as noisy_task
from verl_rfpp.experiments.noisy.analysis import GRPO, LEARNED, OURS, WINDOW, P
from verl_rfpp.experiments.noisy.runs import NOISE_STD, assets_dir, methods_of, restore, train_one
from verl_rfpp.experiments.series import mean, series

DESIGN = noisy_task.SEPARATE
OPTIMIZER = "sgd"
STEPS, SEEDS = 40, 8
DOCS = Path(__file__).resolve().parents[3] / "docs" / "curves" / "noisy"
SHARED_RESULTS = DOCS / "sgd-results.json"  # the shared-rate arm (kept as it is)
RECORD = DOCS / "sgd-own-rate-runs.json"  # the own-rate runs finished so far
OWN_RATES = {OURS: 0.15, GRPO: 0.23}  # own_rates(SHARED_RESULTS), fixed before any run at GRPO's rate
TIMEOUT = 3600  # s a run may take on the shared 2-core machine (runs under load took up to 1315 s)


def informative_rms(results: dict, method: str) -> float:
    """The mean over seeds of a noise-free run's mean ``informative_adv_rms`` at the shared SGD rate."""
    return results["control_summary"][str(DESIGN.sgd_lr)][method]["informative_adv_rms"]["mean"]


def round_2(x: float) -> float:
    """``x`` rounded to two significant digits."""
    return round(x, 1 - math.floor(math.log10(abs(x))))


def own_rates(results: dict) -> dict[str, float]:
    """Each method's SGD rate by the criterion (module docstring): ours the design's, GRPO's
    the one that equalizes the informative advantages' rms, from the shared-rate noise-free runs."""
    ratio = informative_rms(results, OURS) / informative_rms(results, GRPO)
    return {OURS: DESIGN.sgd_lr, GRPO: round_2(DESIGN.sgd_lr * ratio)}


def plan() -> list[tuple[str, float, int]]:
    """The runs to make, in order, as (method, noise std, seed): GRPO at its own rate, noise-free
    seeds 0-7 first (the rate's check: does it learn), then noisy seeds 0-7. Our baseline's runs at
    its rate are the shared-rate arm's (reused, not run)."""
    return [(GRPO, noise, seed) for noise in (0.0, NOISE_STD) for seed in range(SEEDS)]


def reused(results: dict) -> list[dict]:
    """Our baseline's committed shared-rate runs, which the own-rate arm reuses (same rate)."""
    return [r for r in results["runs"] if r["method"]["key"] == OURS and r["lr"] == OWN_RATES[OURS]]


def arm() -> str:
    """The own-rate arm's key (``noisy.analysis.arm_of``): each method's rate, named."""
    return f"{OWN_RATES[GRPO]:g} (GRPO) / {OWN_RATES[OURS]:g} (ours)"


def arm_records(record: dict, shared: dict) -> tuple[list[dict], list[dict]]:
    """The own-rate arm's noisy runs and its noise-free ones: GRPO's from the record, ours reused
    from the shared-rate results, each marked with ``arm()`` so the analysis pairs them."""
    runs = [{**r, "arm": arm()} for r in (*record["runs"], *reused(shared))]
    return [r for r in runs if r["noise_std"] == NOISE_STD], [r for r in runs if r["noise_std"] == 0]


def write_own_rate_report(out: Path, record: dict, shared: dict, spec: dict) -> None:
    """The own-rate arm's report, results and plots in ``out`` (``noisy.report.write_noisy_report``,
    named ``sgd-own-rate-*``); refused until every planned run is in the record."""
    from verl_rfpp.experiments.noisy.report import write_noisy_report

    missing = sorted(set(plan()) - {_cell(r) for r in record["runs"]})
    if missing:
        raise ValueError(f"{len(plan()) - len(missing)} of {len(plan())} own-rate runs exist: no report (no metric "
                         f"of a noisy run is read) before all do; missing {missing}")
    noisy, clean = arm_records(record, shared)
    write_noisy_report(out, noisy, spec, control=tuple(clean),
                       written_by=f"`python -m {__name__} --out DIR --record {RECORD.name} --report OUT` from the "
                                  f"record's runs and our REINFORCE++-baseline's shared-rate runs at "
                                  f"{OWN_RATES[OURS]:g} ({SHARED_RESULTS.name})")


def _cell(record: dict) -> tuple[str, float, int]:
    return record["method"]["key"], record["noise_std"], record["seed"]


def load_record(path: Path) -> dict:
    """The record of the runs finished so far (a fresh one if there is none)."""
    if path.exists():
        return json.loads(path.read_text())
    return {"criterion": __doc__.split("\n\n")[1].replace("\n", " "), "rates": OWN_RATES,
            "plan": [list(cell) for cell in plan()], "runs": []}


def _write(path: Path, record: dict) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(record, indent=1))
    os.replace(partial, path)


def run_plan(out: Path, record_path: Path, echo: Callable[[str], None],
             timeout: float = TIMEOUT, limit: Optional[int] = None) -> dict:
    """Make the planned runs not yet in the record, one at a time, each appended to the record as
    soon as it finishes (``noisy.report.kept``). A noise-free run's line says whether it reached the
    SGD learned level; a noisy run's line says no metric of it (none is read before all exist)."""
    from verl_rfpp.experiments.noisy.report import kept

    record = load_record(record_path)
    restore(out, record["runs"])
    done = {_cell(r) for r in record["runs"]}
    todo = [cell for cell in plan() if cell not in done][:limit]
    echo(f"{len(done)} of {len(plan())} runs in {record_path}; making {len(todo)}, one at a time, in {out}")
    for key, noise, seed in todo:
        (method,) = methods_of((key,))
        run = train_one(method, seed, STEPS, OWN_RATES[key], out, DESIGN, noise, timeout, OPTIMIZER)
        record["runs"].append(kept(run))
        _write(record_path, record)
        line = (f"{method.label} {OPTIMIZER} lr {OWN_RATES[key]:g} noise {noise:g} seed {seed}: done in "
                f"{run['seconds']:.0f} s, weights sha256 {run['weights_sha256'][:8]} "
                f"({len(record['runs'])} of {len(plan())})")
        if noise == 0:
            end = mean(series(run, P + "informative_true_reward")[-WINDOW:])
            line += f"; noise-free informative true reward {end:.3f} (learned level {LEARNED[OPTIMIZER]:g})"
        echo(line)
    return record


def plan_command_line(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_rfpp.experiments.noisy.plan",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="where the runs are made (outside the repository)")
    parser.add_argument("--record", type=Path, default=RECORD, help=f"the record of finished runs (default {RECORD})")
    parser.add_argument("--limit", type=int, help="make at most this many runs")
    parser.add_argument("--report", type=Path, help="once every planned run exists: write the arm's report here")
    args = parser.parse_args(argv)
    rates = own_rates(json.loads(SHARED_RESULTS.read_text()))
    if rates != OWN_RATES:
        print(f"the committed rates {OWN_RATES} are not the criterion's {rates}", file=sys.stderr)
        return 2
    record = run_plan(args.out, args.record, lambda line: print(line, flush=True), limit=args.limit)
    if args.report:
        spec = noisy_task.build_assets(assets_dir(args.out, DESIGN), DESIGN)
        try:
            write_own_rate_report(args.report, record, json.loads(SHARED_RESULTS.read_text()), spec)
        except ValueError as error:
            print(error, file=sys.stderr)
            return 2
        print(f"written: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(plan_command_line())
