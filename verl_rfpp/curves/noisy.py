"""``verl-rfpp curves --task noisy``: every method trained on the noisy-reward task
(``noisy_task``) in verl's real trainer, same prompts, seeds and samples per step; each run's
metrics read back from its tensorboard event files, its estimator proven from its trace."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

from verl_rfpp.cpu import launch, patches
from verl_rfpp.curves import noisy_task
from verl_rfpp.curves.runs import METHODS, CurvesError, Method, proof, read_events
from verl_rfpp.curves.runs import problem as method_problem
from verl_rfpp.curves.series import band, mean, seed_series, series, std

METHODS_NOISY = tuple(m for key in ("verl_grpo", "ours_baseline", "ours_rfpp", "verl_baseline")
                      for m in METHODS if m.key == key)
NOISE_STD = 0.1
LEARNING_RATES = (1e-2,)


def overrides(paths: dict, spec: dict, lr: float) -> list[str]:
    """What the noisy task changes in the CPU backend's run (applied after it: Hydra keeps the last
    value): its data in order, its model, its reward function, one-token responses, the lr."""
    return [
        f"data.train_files={paths['train']}",
        f"data.val_files={paths['test']}",
        "data.shuffle=False",
        "data.max_response_length=1",
        f"actor_rollout_ref.model.path={spec['model']}",
        f"reward.custom_reward_function.path={Path(noisy_task.__file__).resolve()}",
        "reward.custom_reward_function.name=compute_score",
        f"actor_rollout_ref.actor.optim.lr={lr}",
    ]


def run_one(method: Method, seed: int, steps: int, lr: float, out: Path, noise_std: float = NOISE_STD,
            timeout: float = 900) -> dict:
    """One trainer run (cached in its ``run.json`` when steps, lr and noise agree)."""
    directory = out / "runs" / f"{method.key}_lr{lr:g}_noise{noise_std:g}_seed{seed}"
    done = directory / "run.json"
    if done.exists():
        cached = json.loads(done.read_text())
        if (cached["steps"], cached["lr"], cached["noise_std"]) == (steps, lr, noise_std):
            return cached
    spec = noisy_task.build_assets(out / "assets" / "noisy")
    paths = noisy_task.build_data(out / "assets" / f"data_seed{seed}_steps{steps}_noise{noise_std:g}", seed, steps,
                                  noise_std, batch_prompts=launch.PROMPTS)
    env = {patches.PROBE_ENV: f"{noisy_task.__name__}:probe",
           noisy_task.TASK_ENV: str((out / "assets" / "noisy" / "task.json").resolve())}
    result = launch.run(method.estimator, directory, steps=steps, echo=False, timeout=timeout, seed=seed,
                        ours=method.ours, loggers=("console", "tensorboard"), assets_dir=out / "assets" / "demo",
                        extra_overrides=overrides(paths, spec, lr), extra_env=env)
    if result.returncode != 0 or len(result.steps) != steps:
        raise CurvesError(f"{method.label} lr {lr:g} seed {seed}: exit code {result.returncode}, "
                          f"{len(result.steps)}/{steps} steps; see {result.log_path}")
    metrics = read_events(directory / "tensorboard")
    missing = [tag for tag in noisy_task.METRICS if tag not in metrics]
    if missing:
        raise CurvesError(f"{method.label} lr {lr:g} seed {seed}: the probe's metrics {missing} are not in "
                          f"tensorboard; see {result.log_path}")
    record = {"method": asdict(method), "seed": seed, "steps": steps, "lr": lr, "noise_std": noise_std,
              "seconds": round(result.seconds, 1), "weights_sha256": result.digest,
              "proof": proof(method, result.trace, steps), "metrics": metrics}
    done.write_text(json.dumps(record))
    return record


def run_all(out: Path, steps: int, seeds: int, lrs: tuple[float, ...] = LEARNING_RATES,
            methods: tuple[Method, ...] = METHODS_NOISY, noise_std: float = NOISE_STD, timeout: float = 900,
            progress: Optional[Callable[[str], None]] = None) -> list[dict]:
    """Every lr x seed x method, seeds outer to methods (a partial run still covers every method)."""
    records = []
    for lr in lrs:
        for seed in range(seeds):
            for method in methods:
                record = run_one(method, seed, steps, lr, out, noise_std, timeout)
                records.append(record)
                if progress:
                    last = {tag: values[-1][1] for tag, values in record["metrics"].items()}
                    progress(f"{method.label:28s} lr {lr:g} seed {seed}: informative true reward "
                             f"{last[noisy_task.PREFIX + 'informative_true_reward']:+.3f}, flat entropy "
                             f"{last[noisy_task.PREFIX + 'flat_entropy']:.3f}, {record['seconds']:.0f} s")
    return records


# --- results.json, plots, report.md --------------------------------------------------------------

WINDOW = 5  # steps averaged at the end of a run
P = noisy_task.PREFIX
KEPT = (*noisy_task.METRICS, "critic/score/mean", "cpu/advantages_std", "actor/entropy", "actor/kl_loss",
        "actor/reward_kl_penalty", "response_length/mean", "timing_s/step")
def initial(spec: dict) -> dict[str, float]:
    """The probe's policy metrics of the initial model (step 0, the same for every run)."""
    return noisy_task.policy_metrics(spec, [row["start"] for row in spec["prompts"]])


def best_quality(spec: dict) -> float:
    """Mean over informative prompts of the best answer's true quality (what a solved prompt earns)."""
    rows = [row for row in spec["prompts"] if row["kind"] == "informative"]
    return mean([max(row["quality"]) for row in rows])


def prompt_blind_quality(spec: dict) -> float:
    """The best a policy that ignores the prompt can earn on the informative prompts: the largest
    mean over informative prompts of one answer's true quality."""
    rows = [row for row in spec["prompts"] if row["kind"] == "informative"]
    return max(mean([row["quality"][token] for row in rows]) for token in range(len(rows[0]["quality"])))


def _group(records: list[dict]) -> dict[float, dict[str, list[dict]]]:
    """``{lr: {method key: [records by seed]}}``."""
    grouped: dict[float, dict[str, list[dict]]] = {}
    for record in sorted(records, key=lambda r: r["seed"]):
        grouped.setdefault(record["lr"], {}).setdefault(record["method"]["key"], []).append(record)
    return grouped


def _group_noise(records: list[dict]) -> dict[tuple[float, float], dict[str, list[dict]]]:
    """``{(lr, noise_std): {method key: [records by seed]}}``."""
    grouped: dict[tuple[float, float], dict[str, list[dict]]] = {}
    for record in sorted(records, key=lambda r: r["seed"]):
        by_method = grouped.setdefault((record["lr"], record["noise_std"]), {})
        by_method.setdefault(record["method"]["key"], []).append(record)
    return grouped


def summarize(records: list[dict], start: dict[str, float]) -> dict[str, dict[str, dict]]:
    """Per lr and method, over seeds (mean, sample std, the per-seed values), at the end of the runs
    (mean of the last WINDOW steps): informative true reward, flat entropy and its drop from the
    start, flat KL from the start; over all steps: the advantages' rms on flat and informative rows
    and the sampled noise std."""
    table: dict[str, dict[str, dict]] = {}
    for lr, methods in _group(records).items():
        table[str(lr)] = {}
        for key, runs in methods.items():
            row: dict = {"label": runs[0]["method"]["label"], "seeds": [r["seed"] for r in runs],
                         "seconds": mean([r["seconds"] for r in runs]), "proof": sorted({r["proof"] for r in runs})}
            ends = {
                "informative_true_reward": [mean(series(r, P + "informative_true_reward")[-WINDOW:]) for r in runs],
                "flat_entropy": [mean(series(r, P + "flat_entropy")[-WINDOW:]) for r in runs],
                "flat_kl_from_start": [mean(series(r, P + "flat_kl_from_start")[-WINDOW:]) for r in runs],
                "informative_kl_from_start": [mean(series(r, P + "informative_kl_from_start")[-WINDOW:])
                                              for r in runs],
                "flat_adv_rms": [mean(series(r, P + "flat_adv_rms")) for r in runs],
                "informative_adv_rms": [mean(series(r, P + "informative_adv_rms")) for r in runs],
                "noise_std_sampled": [mean(series(r, P + "noise_std_sampled")) for r in runs],
            }
            ends["flat_entropy_drop"] = [start[P + "flat_entropy"] - e for e in ends["flat_entropy"]]
            for name, values in ends.items():
                row[name] = {"mean": mean(values), "std": std(values), "per_seed": values}
            table[str(lr)][key] = row
    return table


def verdicts(table: dict[str, dict[str, dict]]) -> dict[str, dict]:
    """Per lr, GRPO against our REINFORCE++-baseline, seed by seed (same seeds, prompts, samples per
    step): GRPO minus baseline (and GRPO over baseline) of the flat prompts' advantage rms, KL from
    the start and entropy drop, and of the informative true reward; ``noise_as_signal`` when GRPO's
    flat advantages are larger in every seed, ``flat_moved_more`` when its flat KL is, and
    ``informative_reward_lower_for_grpo``. And the control: ours minus verl's REINFORCE++-baseline."""
    out = {}
    for lr, rows in table.items():
        if "verl_grpo" not in rows or "ours_baseline" not in rows:
            continue
        grpo, ours = rows["verl_grpo"], rows["ours_baseline"]
        seeds = sorted(set(grpo["seeds"]) & set(ours["seeds"]))

        def paired(name: str, a: dict = grpo, b: dict = ours) -> dict:
            both = sorted(set(a["seeds"]) & set(b["seeds"]))
            left = [a[name]["per_seed"][a["seeds"].index(s)] for s in both]
            right = [b[name]["per_seed"][b["seeds"].index(s)] for s in both]
            diffs = [x - y for x, y in zip(left, right, strict=True)]
            return {"seeds": both, "diff_mean": mean(diffs), "diff_std": std(diffs), "per_seed": diffs,
                    "ratio": mean(left) / mean(right) if mean(right) else float("inf")}

        verdict = {"seeds": seeds, "flat_kl_from_start": paired("flat_kl_from_start"),
                   "flat_entropy_drop": paired("flat_entropy_drop"),
                   "informative_true_reward": paired("informative_true_reward"),
                   "flat_adv_rms": paired("flat_adv_rms")}
        verdict["noise_as_signal"] = bool(seeds) and all(d > 0 for d in verdict["flat_adv_rms"]["per_seed"])
        verdict["flat_moved_more"] = bool(seeds) and all(d > 0 for d in verdict["flat_kl_from_start"]["per_seed"])
        verdict["informative_reward_lower_for_grpo"] = bool(seeds) and all(
            d < 0 for d in verdict["informative_true_reward"]["per_seed"])
        if "verl_baseline" in rows:
            control = rows["verl_baseline"]
            verdict["control"] = {name: paired(name, ours, control) for name in
                                  ("flat_kl_from_start", "informative_true_reward")}
        out[lr] = verdict
    return out


CONTROL_METHODS = ("verl_grpo", "ours_baseline")
CONTROL_MEASURES = ("flat_kl_from_start", "flat_entropy_drop", "informative_true_reward")


def noise_effect(table: dict[str, dict[str, dict]], control: dict[str, dict[str, dict]]) -> dict:
    """Per lr and method run both ways: the noisy run minus the noise-free control, seed by seed
    (same seeds, data order and sampling seed), for ``CONTROL_MEASURES``: what the noise itself did."""
    out: dict = {}
    for lr, rows in control.items():
        for key, clean in rows.items():
            noisy_row = table.get(lr, {}).get(key)
            if not noisy_row:
                continue
            seeds = sorted(set(noisy_row["seeds"]) & set(clean["seeds"]))
            cell = {"seeds": seeds}
            for name in CONTROL_MEASURES:
                diffs = [noisy_row[name]["per_seed"][noisy_row["seeds"].index(s)]
                         - clean[name]["per_seed"][clean["seeds"].index(s)] for s in seeds]
                cell[name] = {"diff_mean": mean(diffs), "diff_std": std(diffs), "per_seed": diffs}
            out.setdefault(lr, {})[key] = cell
    return out


def plots(out: Path, records: list[dict], start: dict[str, float], best: float, blind: float) -> list[Path]:
    """One figure per lr: informative true reward, flat entropy, flat KL from the start, advantage
    rms on flat rows; line: mean over seeds, band: min..max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    panels = ((P + "informative_true_reward", "informative prompts: true reward E[q]", best, "best answer per prompt"),
              (P + "flat_entropy", "flat prompts: answer entropy (nats)", start[P + "flat_entropy"], "start"),
              (P + "flat_kl_from_start", "flat prompts: KL(pi || pi_start)", None, None),
              (P + "flat_adv_rms", "flat prompts: advantage rms", None, None))
    for (lr, noise), methods in _group_noise(records).items():
        figure, axes = plt.subplots(2, 2, figsize=(11, 7.5))
        for axis, (tag, title, level, level_label) in zip(axes.flat, panels, strict=True):
            for runs in methods.values():
                seeds = len(seed_series(runs, tag))
                band(axis, runs, tag, f"{runs[0]['method']['label']} ({seeds} seeds)", alpha=0.12)
            if level is not None:
                axis.axhline(level, color="grey", linestyle=":", label=level_label)
            if tag == P + "informative_true_reward":
                axis.axhline(blind, color="grey", linestyle="-.", label="best prompt-blind answer")
            axis.set(xlabel="training step", title=title)
            axis.ticklabel_format(axis="y", useOffset=False)
            if tag != P + "informative_true_reward":
                axis.set_ylim(bottom=0)
            axis.grid(alpha=0.3)
        axes[0][0].legend(fontsize=7)
        figure.suptitle(f"reward noise N(0, {noise:g}^2), lr {lr:g}: line mean over seeds, band min..max", fontsize=10)
        figure.tight_layout()
        path = out / (f"noisy_lr{lr:g}.png" if noise else f"noise_free_lr{lr:g}.png")
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def _cell(row: dict, name: str, digits: int = 3) -> str:
    return f"{row[name]['mean']:.{digits}f} ± {row[name]['std']:.{digits}f}"


def report(records: list[dict], spec: dict, control: tuple[dict, ...] = ()) -> str:
    start, best = initial(spec), best_quality(spec)
    table, verdict = summarize(records, start), verdicts(summarize(records, start))
    first = records[0]
    steps, noise = first["steps"], first["noise_std"]
    seeds = max(len(row["seeds"]) for rows in table.values() for row in rows.values())
    informative = sum(row["kind"] == "informative" for row in spec["prompts"])
    answers = sorted(set(spec["answers"]))
    lines = [
        "# Noisy rewards on prompts with nothing to learn, in verl's real trainer (CPU)",
        "",
        f"Written by `verl-rfpp curves --task noisy`: {len({r['method']['key'] for r in records})} methods x "
        f"{seeds} seeds x {steps} steps at lr {', '.join(sorted(table))} of verl 0.9.1's v1 trainer on the CPU "
        "backend ([docs/cpu-backend.md](../../cpu-backend.md)). Every number here was read back from verl's "
        "`tensorboard` logger's event files. Schema of `results.json`: [schema.md](schema.md).",
        "",
        "## The task",
        "",
        f"A contextual bandit with shared parameters: {len(spec['prompts'])} prompts, {informative} informative "
        f"(`i0`..`i{informative - 1}`) and {len(spec['prompts']) - informative} flat (`f0`..), answered by the "
        f"CPU backend's tiny random Qwen2 ({spec.get('parameters', '?')} parameters, hidden 32, 2 layers, "
        f"{len(spec['answers'])}-token vocabulary) with one token (`data.max_response_length=1`). The answer is "
        f"that token's text ({len(answers)} distinct answers; the special tokens all read as the empty answer). "
        f"True quality: N(0, 1) draws per informative prompt and answer (fixed, task seed {spec['task_seed']}), "
        "0 for every answer of a flat prompt. Observed reward: true quality plus N(0, "
        f"{noise:g}^2) noise, fresh per sample (a learned reward model's noise), drawn from a stream seeded by the "
        "run seed and the sample's identity (step, prompt, sample), so every method of one seed sees the same "
        "noise for the same sample. "
        f"Every step trains on {launch.PROMPTS} prompts (2 informative, 2 flat, in an order drawn by the run "
        f"seed; the same order for every method) x {launch.SAMPLES} samples, one optimizer step (Adam), the "
        "validated recipe of each estimator otherwise (KL loss 0.01 for GRPO and the baseline, KL in the reward "
        "for REINFORCE++). The run seed also seeds the rollout's sampling; the model starts from the same "
        "weights in every run. Runs are deterministic "
        "([same seed, same run](../../cpu-backend.md#same-seed-same-run)): two runs of one seed are the same run, "
        "bit for bit.",
        "",
        "Measured every step by the CPU backend's metrics probe (`noisy_task.probe`, in verl's driver, "
        "added to the step's metrics): exact functionals of the policy after the step's update (the rollout "
        "server's weights, pushed by verl after the update; `noisy/probe_policy_step` records the step they "
        "belong to), computed from the answer distribution pi(. | prompt) over the whole vocabulary, no "
        "sampling: `noisy/informative_true_reward` (mean over informative prompts of E_pi[q]), "
        "`noisy/flat_entropy` (mean entropy of the flat prompts' answer distribution, nats), "
        "`noisy/flat_kl_from_start` (mean KL(pi || pi_start) on flat prompts: how far their answer "
        "distribution moved, where nothing was to be learned). From the step's batch: `noisy/flat_adv_rms`, "
        "`noisy/informative_adv_rms` (root mean square of the advantages verl trained on, flat and "
        "informative rows) and `noisy/noise_std_sampled` (std of observed minus true reward of the step's 16 "
        "samples: the noise verl saw).",
        "",
        f"At the start (every run): informative true reward {start[P + 'informative_true_reward']:+.3f} (best "
        f"answer of each prompt {best:.3f}; the best a prompt-blind policy can earn, one answer for every "
        f"prompt, {prompt_blind_quality(spec):.3f}), flat entropy {start[P + 'flat_entropy']:.3f} (uniform: ln "
        f"{len(spec['answers'])} = {math.log(len(spec['answers'])):.3f}).",
        "",
    ]
    for lr, rows in table.items():
        lines += [f"## lr {lr}", "",
                  f"Mean ± sample std over seeds; reward, entropy and KL over the last {WINDOW} steps, advantage "
                  "rms and noise over all steps.", "",
                  "| method | informative true reward | flat entropy | flat entropy drop | flat KL from start "
                  "| informative KL from start | flat adv rms | informative adv rms | noise std seen | s per run |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for row in rows.values():
            lines.append(f"| {row['label']} | {_cell(row, 'informative_true_reward')} | {_cell(row, 'flat_entropy')} "
                         f"| {_cell(row, 'flat_entropy_drop')} | {_cell(row, 'flat_kl_from_start', 4)} "
                         f"| {_cell(row, 'informative_kl_from_start', 4)} | {_cell(row, 'flat_adv_rms')} "
                         f"| {_cell(row, 'informative_adv_rms')} | {_cell(row, 'noise_std_sampled')} "
                         f"| {row['seconds']:.0f} |")
        v = verdict.get(lr)
        if v:
            kl, drop, reward = v["flat_kl_from_start"], v["flat_entropy_drop"], v["informative_true_reward"]
            rms = v["flat_adv_rms"]
            lines += ["", f"GRPO against our REINFORCE++-baseline, seed by seed (seeds {v['seeds']}):",
                      f"- advantages on flat prompts (the noise as the trainer saw it): rms GRPO minus baseline "
                      f"{rms['diff_mean']:+.3f} ± {rms['diff_std']:.3f}; GRPO's is {rms['ratio']:.2f}x the "
                      "baseline's.",
                      f"- flat KL from start: GRPO minus baseline {kl['diff_mean']:+.4f} ± {kl['diff_std']:.4f} "
                      f"(per seed {', '.join(f'{d:+.4f}' for d in kl['per_seed'])}); GRPO's is {kl['ratio']:.2f}x "
                      "the baseline's.",
                      f"- flat entropy drop: {drop['diff_mean']:+.3f} ± {drop['diff_std']:.3f} (per seed "
                      f"{', '.join(f'{d:+.3f}' for d in drop['per_seed'])}); {drop['ratio']:.2f}x.",
                      f"- informative true reward: {reward['diff_mean']:+.3f} ± {reward['diff_std']:.3f} (per seed "
                      f"{', '.join(f'{d:+.3f}' for d in reward['per_seed'])}).",
                      f"- Verdict at lr {lr}: GRPO presents the noise on flat prompts as signal (larger flat "
                      f"advantages than the baseline in every seed): {'yes' if v['noise_as_signal'] else 'no'}. "
                      "GRPO's flat prompts moved further from the start than the baseline's in every seed: "
                      f"{'yes' if v['flat_moved_more'] else 'no'}. GRPO's informative true reward below the "
                      f"baseline's in every seed: {'yes' if v['informative_reward_lower_for_grpo'] else 'no'}."]
            if "control" in v:
                c = v["control"]
                lines.append(f"- Control, ours minus verl's REINFORCE++-baseline (seeds "
                             f"{c['flat_kl_from_start']['seeds']}): flat KL "
                             f"{c['flat_kl_from_start']['diff_mean']:+.4f} ± "
                             f"{c['flat_kl_from_start']['diff_std']:.4f}, "
                             f"informative true reward {c['informative_true_reward']['diff_mean']:+.3f} ± "
                             f"{c['informative_true_reward']['diff_std']:.3f}.")
        lines += ["", f"![noisy rewards at lr {lr}](noisy_lr{float(lr):g}.png)", ""]
    if control:
        clean = summarize(list(control), start)
        effect = noise_effect(table, clean)
        lines += ["## Noise-free control", "",
                  "The same runs (same seeds: data order, sampling seed; same weights at the start) with reward "
                  "noise 0, for GRPO and our REINFORCE++-baseline: the flat prompts then get advantage 0 from both "
                  "(every flat group's rewards are equal), so whatever moves them is the shared parameters "
                  "carrying over what the informative prompts learn. The noisy run minus this control, seed by "
                  "seed, is what the noise itself did.", ""]
        for lr, rows in clean.items():
            lines += [f"lr {lr}:", "", "| method (noise 0) | informative true reward | flat entropy | flat KL from "
                      "start | flat adv rms | noise std seen |", "| --- | --- | --- | --- | --- | --- |"]
            for row in rows.values():
                lines.append(f"| {row['label']} | {_cell(row, 'informative_true_reward')} | "
                             f"{_cell(row, 'flat_entropy')} | {_cell(row, 'flat_kl_from_start', 4)} | "
                             f"{_cell(row, 'flat_adv_rms')} | {_cell(row, 'noise_std_sampled')} |")
            lines.append("")
            for key, cell in effect.get(lr, {}).items():
                kl, reward = cell["flat_kl_from_start"], cell["informative_true_reward"]
                lines.append(f"- {rows[key]['label']}, noisy minus noise-free (seeds {cell['seeds']}): flat KL from "
                             f"start {kl['diff_mean']:+.4f} ± {kl['diff_std']:.4f} (per seed "
                             f"{', '.join(f'{d:+.4f}' for d in kl['per_seed'])}); informative true reward "
                             f"{reward['diff_mean']:+.3f} ± {reward['diff_std']:.3f} (per seed "
                             f"{', '.join(f'{d:+.3f}' for d in reward['per_seed'])}).")
            lines += ["", f"![noise-free control at lr {lr}](noise_free_lr{float(lr):g}.png)", ""]
    lines += ["## Which estimator ran", "",
              "As in [the demo task's curves](../report.md): ours with the plugin loaded, verl's with "
              "`VERL_USE_EXTERNAL_PLUGINS=none`, proven per run from the run trace:", ""]
    for lr, rows in table.items():
        for row in rows.values():
            lines.append(f"- lr {lr}, {row['label']}: {'; '.join(row['proof'])}")
    for lr, rows in (summarize(list(control), start) if control else {}).items():
        for row in rows.values():
            lines.append(f"- lr {lr}, noise 0, {row['label']}: {'; '.join(row['proof'])}")
    return "\n".join(lines) + "\n"


def write(out: Path, records: list[dict], spec: dict, notes: str = "", control: tuple[dict, ...] = ()) -> None:
    """results.json (settings, the start, the summary, the verdicts, the noise-free ``control``'s
    summary and the noise's effect, every run's kept metrics), one plot per lr and noise level and
    report.md (``notes`` appended)."""
    out.mkdir(parents=True, exist_ok=True)
    start = initial(spec)
    table = summarize(records, start)
    kept = [{**record, "metrics": {tag: values for tag, values in record["metrics"].items() if tag in KEPT}}
            for record in (*records, *control)]
    settings = {"prompts": [{"text": row["text"], "kind": row["kind"]} for row in spec["prompts"]],
                "answers": spec["answers"], "task_seed": spec["task_seed"], "parameters": spec.get("parameters"),
                "noise_std": records[0]["noise_std"], "steps": records[0]["steps"],
                "prompts_per_step": launch.PROMPTS, "samples_per_prompt": launch.SAMPLES, "window": WINDOW,
                "quality": {row["text"]: row["quality"] for row in spec["prompts"]}}
    clean = summarize(list(control), start) if control else {}
    results = {"settings": settings, "initial": start, "best_quality": best_quality(spec),
               "prompt_blind_quality": prompt_blind_quality(spec), "summary": table,
               "verdicts": verdicts(table), "control_summary": clean, "noise_effect": noise_effect(table, clean),
               "runs": kept}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    plots(out, [*records, *control], start, best_quality(spec), prompt_blind_quality(spec))
    text = report(records, spec, control)
    (out / "report.md").write_text(text + (("\n" + notes.strip() + "\n") if notes else ""))


QUICK = {"steps": 2, "seeds": 1}


def problem(args) -> Optional[str]:
    """Why ``curves --task noisy`` refuses these arguments (unknown methods, a learning rate not
    above 0, a negative noise std), or None."""
    if method_problem(args.methods):
        return method_problem(args.methods)
    lrs = tuple(args.lrs) if args.lrs else LEARNING_RATES
    if not (lrs and all(lr > 0 for lr in lrs) and args.noise_std >= 0):  # --steps, --seeds: at parse time
        return (f"verl-rfpp curves --task noisy: every --lrs value {list(lrs)} must be positive and --noise-std "
                f"{args.noise_std} non-negative")
    return None


def command(args, echo: Callable[[str], None]) -> int:
    """``verl-rfpp curves --task noisy`` (arguments ``problem`` accepts): run (or reuse) every lr x
    seed x method, then write results.json, the plots and report.md into ``--out``. ``--quick``:
    2 steps, 1 seed."""
    out = Path(args.out)
    methods = tuple(m for m in METHODS if m.key in args.methods) if args.methods else METHODS_NOISY
    steps, seeds = (QUICK["steps"], QUICK["seeds"]) if args.quick else (args.steps, args.seeds)
    lrs = tuple(args.lrs) if args.lrs else LEARNING_RATES
    echo(f"verl-rfpp curves --task noisy: {len(methods)} methods x {seeds} seeds x {steps} steps x lr "
         f"{', '.join(f'{lr:g}' for lr in lrs)}, reward noise std {args.noise_std:g}; runs in {out / 'runs'}")
    records = run_all(out, steps, seeds, lrs, methods, args.noise_std, progress=echo)
    control = ()
    if args.control:
        control_methods = tuple(m for m in METHODS_NOISY if m.key in CONTROL_METHODS)
        control = tuple(run_all(out, steps, args.control, lrs, control_methods, 0.0, progress=echo))
    spec = noisy_task.build_assets(out / "assets" / "noisy")
    write(out, records, spec, control=control)
    echo((out / "report.md").read_text())
    echo(f"written: {out / 'report.md'}, {out / 'results.json'}, {out}/noisy_lr*.png")
    return 0
