"""Train every method on the same data and seeds; read each run's metrics back from its
tensorboard event files; prove from the run trace which estimator ran."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

from verl_rfpp import catalog
from verl_rfpp.cpu import configuration, launch
from verl_rfpp.cpu import trace as run_trace
from verl_rfpp.errors import RfppError

logger = logging.getLogger("verl_rfpp")

# the module of verl's registry entry for an estimator: ours (``GuardedEstimator``) or verl's own
OUR_MODULE, VERL_MODULE = "verl_rfpp.adapter.registries", "verl.trainer.ppo.core_algos"


class CurvesError(RfppError):
    """A curves run failed, or its trace does not show the estimator it was meant to run."""


@dataclass(frozen=True)
class Method:
    """One trained configuration: ``ours`` loads the plugin, otherwise verl loads no plugin."""

    key: str
    label: str
    estimator: str
    ours: bool


METHODS = (
    *(Method(f"{side}_{record.short}", f"{side} {record.label}", record.name, side == "ours")
      for record in catalog.in_report_order() for side in ("ours", "verl")),
    Method("verl_grpo", "verl GRPO", configuration.GRPO, False),
)


def problem(keys: Optional[list[str]]) -> Optional[str]:
    """Why ``curves`` refuses these ``--methods`` keys (one it does not know), or None."""
    unknown = sorted(set(keys or []) - {m.key for m in METHODS})
    if not unknown:
        return None
    return f"verl-rfpp curves: unknown method(s) {', '.join(unknown)}; choose from {', '.join(m.key for m in METHODS)}"


def read_events(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a tensorboard log directory as ``{tag: [(step, value), ...]}``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(event.step, float(event.value)) for event in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def proof(method: Method, trace: list[str], steps: int) -> str:
    """What the trace shows ran; raises ``CurvesError`` unless it is ``method``'s estimator.

    Ours: one plugin trace line per step and verl's registry resolving both names to the plugin.
    verl's: no plugin trace line at all and the registry resolving both names to verl's core_algos."""
    names = catalog.names()
    calls = [line for line in trace if run_trace.parse(line)[0] in names]
    resolved = {tuple(fields[name] for name in names) for fields in run_trace.lines_of(trace, "metrics")}
    expected = (OUR_MODULE if method.ours else VERL_MODULE,) * len(names)
    wanted_calls = steps if method.ours else 0
    own_calls = [line for line in calls if line.startswith(method.estimator + " ")]
    if resolved != {expected} or len(calls) != wanted_calls or len(own_calls) != wanted_calls:
        raise CurvesError(
            f"{method.label}: the trace shows {len(calls)} verl_rfpp estimator calls and registry "
            f"modules {sorted(resolved)}; expected {wanted_calls} calls of {method.estimator} and "
            f"{expected[0]} (the plugin must be {'loaded' if method.ours else 'excluded'} in this run)"
        )
    return (f"{len(own_calls)} verl_rfpp {method.estimator} calls; registry -> {expected[0]}" if method.ours
            else f"no verl_rfpp estimator call; registry -> {expected[0]}")


def run_one(method: Method, seed: int, steps: int, out: Path, timeout: float) -> dict:
    """One trainer run (cached in ``run.json``): its metrics from tensorboard and its proof."""
    directory = out / "runs" / f"{method.key}_seed{seed}"
    done = directory / "run.json"
    if done.exists():
        cached = json.loads(done.read_text())
        if cached["steps"] == steps:
            return cached
    result = launch.run(method.estimator, directory, steps=steps, echo=False, timeout=timeout, seed=seed,
                        ours=method.ours, loggers=("console", "tensorboard"), assets_dir=out / "assets")
    if result.returncode != 0 or len(result.steps) != steps:
        raise CurvesError(f"{method.label} seed {seed}: exit code {result.returncode}, "
                          f"{len(result.steps)}/{steps} steps; see {result.log_path}")
    metrics = read_events(directory / "tensorboard")
    record = {"method": asdict(method), "seed": seed, "steps": steps, "seconds": round(result.seconds, 1),
              "weights_sha256": result.digest,
              "proof": proof(method, result.trace, steps), "metrics": metrics}
    done.write_text(json.dumps(record))
    return record


def run_all(out: Path, steps: int, seeds: int, methods: tuple[Method, ...] = METHODS, timeout: float = 900,
            progress: Optional[Callable[[str], None]] = None) -> list[dict]:
    """Every method x seed, seeds outermost (a partial run still covers every method)."""
    records = []
    for seed in range(seeds):
        for method in methods:
            record = run_one(method, seed, steps, out, timeout)
            records.append(record)
            if progress:
                rewards = [value for _, value in record["metrics"]["critic/score/mean"]]
                progress(f"{method.label:28s} seed {seed}: reward {rewards[0]:.3f} -> {rewards[-1]:.3f}, "
                         f"{record['seconds']:.0f} s; {record['proof']}")
    return records
