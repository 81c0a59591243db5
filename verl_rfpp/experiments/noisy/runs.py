"""The noisy task's trainer runs: each method trained on the task (``noisy.task``) in verl's real
trainer, same prompts, seeds and samples per step; each run's metrics read back from its
tensorboard event files, its estimator proven from its trace, cached in ``--out``."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

from verl_rfpp.cpu import launch, patches
from verl_rfpp.experiments.noisy import reward as noisy_reward
from verl_rfpp.experiments.noisy import task as noisy_task
from verl_rfpp.experiments.runs import METHODS, CurvesError, Method, proof, read_events

NOISE_STD = 0.1


def optimizer_of(record: dict) -> str:
    """A run's optimizer (runs made before ``--optimizer`` existed were AdamW's)."""
    return record.get("optimizer", "adamw")


def methods_of(keys: tuple[str, ...]) -> tuple[Method, ...]:
    """The ``Method`` records of ``keys``, in that order."""
    return tuple(m for key in keys for m in METHODS if m.key == key)


def overrides(paths: dict, spec: dict, lr: float, design: noisy_task.Design, optimizer: str = "adamw") -> list[str]:
    """What the noisy task changes in the CPU backend's run (applied after it: Hydra keeps the last
    value): its data in order, its model, its reward function, one-token responses, the design's
    batch (prompts x samples, one mini-batch and one micro-batch), the lr and the optimizer."""
    rows = design.prompts_per_step * design.samples
    return [
        f"data.train_files={paths['train']}",
        f"data.val_files={paths['test']}",
        "data.shuffle=False",
        "data.max_response_length=1",
        f"data.train_batch_size={design.prompts_per_step}",
        f"actor_rollout_ref.rollout.n={design.samples}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={design.prompts_per_step}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={rows}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={rows}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={rows}",
        f"actor_rollout_ref.model.path={spec['model']}",
        f"reward.custom_reward_function.path={Path(noisy_reward.__file__).resolve()}",
        f"reward.custom_reward_function.name={noisy_reward.noisy_score.__name__}",
        f"actor_rollout_ref.actor.optim.lr={lr}",
        *noisy_task.OPTIMIZERS[optimizer],
    ]


def run_dir(out: Path, design: noisy_task.Design, method: Method, lr: float, noise_std: float, seed: int,
            optimizer: str = "adamw") -> Path:
    """Where one run lives under ``--out`` (an optimizer other than AdamW named after the method)."""
    named = "" if optimizer == "adamw" else f"_{optimizer}"
    return out / "runs" / f"{design.key}_{method.key}{named}_lr{lr:g}_noise{noise_std:g}_seed{seed}"


def train_one(method: Method, seed: int, steps: int, lr: float, out: Path, design: noisy_task.Design,
            noise_std: float = NOISE_STD, timeout: float = 900, optimizer: str = "adamw") -> dict:
    """One trainer run (cached in its ``run.json`` when steps, lr, noise and optimizer agree)."""
    directory = run_dir(out, design, method, lr, noise_std, seed, optimizer)
    done = directory / "run.json"
    if done.exists():
        cached = json.loads(done.read_text())
        if (cached["steps"], cached["lr"], cached["noise_std"], optimizer_of(cached)) \
                == (steps, lr, noise_std, optimizer):
            return cached
    spec = noisy_task.build_assets(assets_dir(out, design), design)
    paths = noisy_task.build_data(out / "assets" / f"data_{design.key}_seed{seed}_steps{steps}_noise{noise_std:g}",
                                  design, seed, steps, noise_std)
    env = {patches.PROBE_ENV: f"{noisy_task.__name__}:probe",
           noisy_task.TASK_ENV: str((assets_dir(out, design) / "task.json").resolve())}
    result = launch.run(method.estimator, directory, steps=steps, echo=False, timeout=timeout, seed=seed,
                        ours=method.ours, loggers=("console", "tensorboard"), assets_dir=out / "assets" / "demo",
                        extra_overrides=overrides(paths, spec, lr, design, optimizer), extra_env=env)
    if result.returncode != 0 or len(result.steps) != steps:
        raise CurvesError(f"{method.label} lr {lr:g} seed {seed}: exit code {result.returncode}, "
                          f"{len(result.steps)}/{steps} steps; see {result.log_path}")
    metrics = read_events(directory / "tensorboard")
    missing = [tag for tag in noisy_task.METRICS if tag not in metrics]
    if missing:
        raise CurvesError(f"{method.label} lr {lr:g} seed {seed}: the probe's metrics {missing} are not in "
                          f"tensorboard; see {result.log_path}")
    record = {"design": design.key, "method": asdict(method), "seed": seed, "steps": steps, "lr": lr,
              "noise_std": noise_std, "optimizer": optimizer, "seconds": round(result.seconds, 1),
              "weights_sha256": result.digest,
              "proof": proof(method, result.trace, steps), "metrics": metrics}
    done.write_text(json.dumps(record))
    return record


def restore(out: Path, records: list[dict]) -> list[Path]:
    """Each run of ``records`` (a results.json's ``runs``) written as the ``run.json`` ``train_one``
    reuses and ``finished`` reads in ``out``, so a command continues runs made elsewhere (one already
    there with the same weights digest is kept; another run in its place is refused): the files
    written."""
    written = []
    for record in records:
        (method,) = methods_of((record["method"]["key"],))
        done = run_dir(out, noisy_task.DESIGNS[record["design"]], method, record["lr"], record["noise_std"],
                       record["seed"], optimizer_of(record)) / "run.json"
        if done.exists():
            there = json.loads(done.read_text())["weights_sha256"]
            if there != record["weights_sha256"]:
                raise CurvesError(f"{done} holds a run with weights sha256 {there}, not {record['weights_sha256']}: "
                                  "restore into another --out")
            continue
        done.parent.mkdir(parents=True, exist_ok=True)
        done.write_text(json.dumps(record))
        written.append(done)
    return written


def assets_dir(out: Path, design: noisy_task.Design) -> Path:
    """Where the design's tokenizer, model and task.json are built under ``--out``."""
    return out / "assets" / f"noisy_{design.key}"


def train_all(out: Path, design: noisy_task.Design, steps: int, seeds: int, lrs: tuple[float, ...],
            methods: tuple[Method, ...], noise_std: float = NOISE_STD, timeout: float = 900,
            progress: Optional[Callable[[str], None]] = None, optimizer: str = "adamw") -> list[dict]:
    """Every lr x seed x method, seeds outer to methods (a partial run still covers every method)."""
    records = []
    for lr in lrs:
        for seed in range(seeds):
            for method in methods:
                record = train_one(method, seed, steps, lr, out, design, noise_std, timeout, optimizer)
                records.append(record)
                if progress:
                    last = {tag: values[-1][1] for tag, values in record["metrics"].items()}
                    progress(f"{method.label:28s} lr {lr:g} seed {seed}: informative true reward "
                             f"{last[noisy_task.PREFIX + 'informative_true_reward']:+.3f}, flat entropy "
                             f"{last[noisy_task.PREFIX + 'flat_entropy']:.3f}, {record['seconds']:.0f} s")
    return records


def finished(out: Path, design: noisy_task.Design, steps: int, lrs: tuple[float, ...], noise_std: float,
             optimizer: str = "adamw") -> list[dict]:
    """Every run finished in ``--out`` (its ``run.json``) of this design, step count, lr, noise
    level and optimizer, whichever command ran it, by method and seed: what the report covers."""
    found = []
    for done in sorted((out / "runs").glob(f"{design.key}_*/run.json")):
        record = json.loads(done.read_text())
        if (record.get("design"), record["steps"], record["noise_std"], optimizer_of(record)) \
                == (design.key, steps, noise_std, optimizer) and record["lr"] in lrs:
            found.append(record)
    return sorted(found, key=lambda r: (r["lr"], r["seed"], [m.key for m in METHODS].index(r["method"]["key"])))
