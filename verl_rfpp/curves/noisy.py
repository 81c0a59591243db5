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
from verl_rfpp.curves import noisy_reward, noisy_task
from verl_rfpp.curves.runs import METHODS, CurvesError, Method, proof, read_events
from verl_rfpp.curves.runs import problem as method_problem
from verl_rfpp.curves.series import band, mean, paired, seed_series, series, std

NOISE_STD = 0.1


def methods_of(keys: tuple[str, ...]) -> tuple[Method, ...]:
    """The ``Method`` records of ``keys``, in that order."""
    return tuple(m for key in keys for m in METHODS if m.key == key)


def overrides(paths: dict, spec: dict, lr: float, design: noisy_task.Design) -> list[str]:
    """What the noisy task changes in the CPU backend's run (applied after it: Hydra keeps the last
    value): its data in order, its model, its reward function, one-token responses, the design's
    batch (prompts x samples, one mini-batch and one micro-batch), the lr."""
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
        "reward.custom_reward_function.name=compute_score",
        f"actor_rollout_ref.actor.optim.lr={lr}",
    ]


def run_one(method: Method, seed: int, steps: int, lr: float, out: Path, design: noisy_task.Design,
            noise_std: float = NOISE_STD, timeout: float = 900) -> dict:
    """One trainer run (cached in its ``run.json`` when steps, lr and noise agree)."""
    directory = out / "runs" / f"{design.key}_{method.key}_lr{lr:g}_noise{noise_std:g}_seed{seed}"
    done = directory / "run.json"
    if done.exists():
        cached = json.loads(done.read_text())
        if (cached["steps"], cached["lr"], cached["noise_std"]) == (steps, lr, noise_std):
            return cached
    spec = noisy_task.build_assets(assets_dir(out, design), design)
    paths = noisy_task.build_data(out / "assets" / f"data_{design.key}_seed{seed}_steps{steps}_noise{noise_std:g}",
                                  design, seed, steps, noise_std)
    env = {patches.PROBE_ENV: f"{noisy_task.__name__}:probe",
           noisy_task.TASK_ENV: str((assets_dir(out, design) / "task.json").resolve())}
    result = launch.run(method.estimator, directory, steps=steps, echo=False, timeout=timeout, seed=seed,
                        ours=method.ours, loggers=("console", "tensorboard"), assets_dir=out / "assets" / "demo",
                        extra_overrides=overrides(paths, spec, lr, design), extra_env=env)
    if result.returncode != 0 or len(result.steps) != steps:
        raise CurvesError(f"{method.label} lr {lr:g} seed {seed}: exit code {result.returncode}, "
                          f"{len(result.steps)}/{steps} steps; see {result.log_path}")
    metrics = read_events(directory / "tensorboard")
    missing = [tag for tag in noisy_task.METRICS if tag not in metrics]
    if missing:
        raise CurvesError(f"{method.label} lr {lr:g} seed {seed}: the probe's metrics {missing} are not in "
                          f"tensorboard; see {result.log_path}")
    record = {"design": design.key, "method": asdict(method), "seed": seed, "steps": steps, "lr": lr,
              "noise_std": noise_std, "seconds": round(result.seconds, 1), "weights_sha256": result.digest,
              "proof": proof(method, result.trace, steps), "metrics": metrics}
    done.write_text(json.dumps(record))
    return record


def assets_dir(out: Path, design: noisy_task.Design) -> Path:
    """Where the design's tokenizer, model and task.json are built under ``--out``."""
    return out / "assets" / f"noisy_{design.key}"


def run_all(out: Path, design: noisy_task.Design, steps: int, seeds: int, lrs: tuple[float, ...],
            methods: tuple[Method, ...], noise_std: float = NOISE_STD, timeout: float = 900,
            progress: Optional[Callable[[str], None]] = None) -> list[dict]:
    """Every lr x seed x method, seeds outer to methods (a partial run still covers every method)."""
    records = []
    for lr in lrs:
        for seed in range(seeds):
            for method in methods:
                record = run_one(method, seed, steps, lr, out, design, noise_std, timeout)
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
    start, KL from the start, the flat-informative total variation gap; over all steps: the
    advantages' rms on flat and informative rows and the sampled noise std."""
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
            if all(series(r, P + "flat_informative_tv") for r in runs):  # runs before the gap was probed lack it
                ends["flat_informative_tv"] = [mean(series(r, P + "flat_informative_tv")[-WINDOW:]) for r in runs]
            for name, values in ends.items():
                row[name] = {"mean": mean(values), "std": std(values), "per_seed": values}
            table[str(lr)][key] = row
    return table


NOISE_MEASURES = ("flat_entropy_drop", "flat_kl_from_start", "informative_true_reward")  # the policy's own
PAIRED_MEASURES = (*NOISE_MEASURES, "flat_adv_rms", "informative_adv_rms")


def _paired(a: dict, b: dict, name: str) -> dict:
    """``a`` minus ``b`` on measure ``name``, seed by seed over the seeds both ran (``paired``), and
    the ratio of their means."""
    both = sorted(set(a["seeds"]) & set(b["seeds"]))
    left = [a[name]["per_seed"][a["seeds"].index(s)] for s in both]
    right = [b[name]["per_seed"][b["seeds"].index(s)] for s in both]
    return {"seeds": both, **paired(left, right), "ratio": mean(left) / mean(right) if mean(right) else float("inf")}


def answer(d: dict, sign: int) -> str:
    """The verdict's rule on one paired difference ``d``, fixed when only seed 0 had run:
    ``yes`` when ``sign`` times it is positive in every seed, ``no`` when negative in every seed,
    ``mixed`` otherwise (docs/curves/noisy/report.md, Verdict)."""
    if d["per_seed"] and all(sign * x > 0 for x in d["per_seed"]):
        return "yes"
    if d["per_seed"] and all(sign * x < 0 for x in d["per_seed"]):
        return "no"
    return "mixed"


def verdicts(table: dict[str, dict[str, dict]]) -> dict:
    """Per lr, GRPO against our REINFORCE++-baseline, seed by seed (same seeds: data order, start,
    sampling and noise streams): GRPO minus baseline on every ``PAIRED_MEASURES`` (``_paired``);
    ``noise_as_signal`` when GRPO's flat advantages are larger in every seed, ``flat_moved_more``
    when its flat KL from the start is, ``informative_reward_lower_for_grpo`` when its informative
    true reward is lower in every seed. And the control: ours minus verl's REINFORCE++-baseline."""
    out = {}
    for lr, rows in table.items():
        if "verl_grpo" not in rows or "ours_baseline" not in rows:
            continue
        grpo, ours = rows["verl_grpo"], rows["ours_baseline"]
        verdict: dict = {"seeds": sorted(set(grpo["seeds"]) & set(ours["seeds"]))}
        verdict.update({name: _paired(grpo, ours, name) for name in PAIRED_MEASURES})
        verdict["noise_as_signal"] = answer(verdict["flat_adv_rms"], 1) == "yes"
        verdict["flat_moved_more"] = answer(verdict["flat_kl_from_start"], 1) == "yes"
        verdict["informative_reward_lower_for_grpo"] = answer(verdict["informative_true_reward"], -1) == "yes"
        if "verl_baseline" in rows:
            verdict["control"] = {name: _paired(ours, rows["verl_baseline"], name) for name in PAIRED_MEASURES}
        out[lr] = verdict
    return out


def noise_effect(table: dict[str, dict[str, dict]], control: dict[str, dict[str, dict]]) -> dict:
    """Per lr and method run both ways: the noisy run minus the noise-free control, seed by seed
    (same seeds, data order and sampling streams), on ``NOISE_MEASURES``: what the noise itself did."""
    out: dict = {}
    for lr, rows in control.items():
        for key, clean in rows.items():
            noisy_row = table.get(lr, {}).get(key)
            if noisy_row:
                out.setdefault(lr, {})[key] = {
                    "seeds": sorted(set(noisy_row["seeds"]) & set(clean["seeds"])),
                    **{name: _paired(noisy_row, clean, name) for name in NOISE_MEASURES}}
    return out


def output_name(design: str, name: str) -> str:
    """The name under ``--out`` of a file the ``design`` writes: the separate design's as named,
    another design's prefixed with its key (``shared-report.md``), so one ``--out`` holds both."""
    return name if design == noisy_task.SEPARATE.key else f"{design}-{name}"


def plots(out: Path, records: list[dict], start: dict[str, float], best: float, blind: float,
          design: str) -> list[Path]:
    """One figure per lr and noise level: informative true reward, flat entropy, flat KL from the
    start, the flat-informative gap, advantage rms on flat and on informative rows; line: mean over
    seeds, band: min..max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    panels = ((P + "informative_true_reward", "informative prompts: true reward E[q]", best, "best answer per prompt"),
              (P + "flat_entropy", "flat prompts: answer entropy (nats)", start[P + "flat_entropy"], "start"),
              (P + "flat_kl_from_start", "flat prompts: KL(pi || pi_start)", None, None),
              (P + "flat_informative_tv", "flat vs informative prompts: total variation", None, None),
              (P + "flat_adv_rms", "flat prompts: advantage rms", None, None),
              (P + "informative_adv_rms", "informative prompts: advantage rms", None, None))
    for (lr, noise), methods in _group_noise(records).items():
        figure, axes = plt.subplots(2, 3, figsize=(15, 7.5))
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
        path = out / output_name(design, f"noisy_lr{lr:g}.png" if noise else f"noise_free_lr{lr:g}.png")
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def _cell(row: dict, name: str, digits: int = 3) -> str:
    if name not in row:
        return "not probed"
    return f"{row[name]['mean']:.{digits}f} ± {row[name]['std']:.{digits}f}"


def _diff(d: dict, digits: int = 3) -> str:
    """A paired difference in one phrase: mean ± std, the per-seed values, the sign count, the
    exact sign test's p and the bootstrap interval."""
    low, high = d["bootstrap_95"] or (float("nan"), float("nan"))
    return (f"{d['diff_mean']:+.{digits}f} ± {d['diff_std']:.{digits}f} (per seed "
            f"{', '.join(f'{x:+.{digits}f}' for x in d['per_seed'])}; {d['positive']} of {len(d['per_seed'])} "
            f"positive, sign test p = {d['sign_test_p']:.3f}, 95% bootstrap [{low:+.{digits}f}, {high:+.{digits}f}])")


GAP_STEPS = (1, 5, 10, 20, 30, 40, 60, 80)
LABELS = {"flat_entropy_drop": "flat entropy drop (nats)", "flat_kl_from_start": "flat KL from start",
          "informative_true_reward": "informative true reward", "flat_adv_rms": "flat advantage rms",
          "informative_adv_rms": "informative advantage rms"}


LEARNED = 1.6  # informative true reward the noise-free baseline must reach in every seed (issue 32)
QUESTIONS = (  # (measure, the claimed sign of GRPO minus the baseline, the claim)
    ("flat_adv_rms", 1, "GRPO's flat advantages are larger (noise presented as signal)"),
    ("flat_kl_from_start", 1, "GRPO's flat prompts moved further from their start"),
    ("flat_entropy_drop", 1, "GRPO's flat prompts lost more entropy"),
    ("informative_true_reward", -1, "GRPO learned the informative prompts more slowly (lower informative true "
                                    "reward at the end)"),
)


def _verdict_lines(lr: str, v: dict, rows: dict, clean_rows: dict) -> list[str]:
    """The plain answer at ``lr``: each claim of ``QUESTIONS`` judged by ``answer`` on GRPO minus our
    REINFORCE++-baseline (``verdicts``), and whether the noise-free baseline learned (``LEARNED``)."""
    answers = {name: answer(v[name], sign) for name, sign, _ in QUESTIONS}
    moved, slowed = answers["flat_kl_from_start"], answers["informative_true_reward"]
    plain = "yes" if moved == slowed == "yes" else "no" if "yes" not in (moved, slowed) else "partly"
    lines = [f"**Does GRPO's noise-as-signal move the flat prompts further and slow the informative ones, with "
             f"this model, at lr {lr}? {plain.capitalize()}**: flat prompts moved further: {moved}; informative "
             f"ones learned more slowly: {slowed}. GRPO against our REINFORCE++-baseline, paired over seeds "
             f"{v['seeds']}:", ""]
    for name, sign, claim in QUESTIONS:
        grpo, ours = rows["verl_grpo"][name]["mean"], rows["ours_baseline"][name]["mean"]
        lines.append(f"- {claim}: **{answers[name]}**. GRPO {grpo:.3f}, baseline {ours:.3f} "
                     f"({v[name]['ratio']:.2f}x); GRPO minus baseline {_diff(v[name])}.")
    if "ours_baseline" in clean_rows:
        reached = clean_rows["ours_baseline"]["informative_true_reward"]["per_seed"]
        lines.append(f"- Noise-free, our REINFORCE++-baseline learned the informative prompts (true reward at "
                     f"least {LEARNED} in every seed): **{'yes' if min(reached) >= LEARNED else 'no'}** (per seed "
                     f"{', '.join(f'{x:.3f}' for x in reached)}).")
    return lines + [
        "",
        "The rule, fixed when only seed 0 had run, before any other seed was read: a claim holds (**yes**) "
        "when GRPO minus the baseline has the claimed sign in every seed (with 5 seeds the exact sign test's "
        "smallest two-sided p, 0.0625, one-sided 0.031, and the bootstrap interval then excludes 0), **no** when "
        "it has the opposite sign in every seed, **mixed** otherwise; the plain answer is yes when both "
        "consequences hold, no when neither does, partly otherwise.", ""]


def _gap_table(records: list[dict], title: str) -> list[str]:
    """Per method, the flat-informative total variation gap at GAP_STEPS, mean (min..max) over seeds."""
    if not all(series(r, P + "flat_informative_tv") for r in records):
        return [f"({title}: not probed in these runs)"]
    steps = [s for s in GAP_STEPS if s <= records[0]["steps"]]
    lines = [f"| {title} | " + " | ".join(f"step {s}" for s in steps) + " |",
             "| --- |" + " --- |" * len(steps)]
    for runs in _group(records)[records[0]["lr"]].values():
        cells = []
        for step in steps:
            values = [series(r, P + "flat_informative_tv")[step - 1] for r in runs]
            cells.append(f"{mean(values):.3f} ({min(values):.3f}..{max(values):.3f})")
        lines.append(f"| {runs[0]['method']['label']} | " + " | ".join(cells) + " |")
    return lines


def _task_text(spec: dict, noise: float) -> str:
    """The task paragraph of report.md, for the spec's design."""
    design = noisy_task.DESIGNS[spec["design"]]
    informative = [row["text"] for row in spec["prompts"] if row["kind"] == "informative"]
    flat = [row["text"] for row in spec["prompts"] if row["kind"] == "flat"]
    if design.one_token:
        seeing = ("whose input and output embeddings are separate matrices. Each prompt is one token of its own "
                  "and the last token of its templated prompt (`<|im_start|>a`), so the answer is read at the "
                  "position of the prompt's own embedding")
    else:
        seeing = ("whose output layer is its input embedding (tied). A prompt is two tokens, its kind and a digit, "
                  "each shared with other prompts, between chat markers (`<|im_start|>i3<|im_end|><|im_start|>`), so "
                  "the answer's position tells prompts apart only through attention")
    return (
        f"A contextual bandit: {len(spec['prompts'])} prompts, {len(informative)} informative "
        f"(`{informative[0]}`..`{informative[-1]}`) and {len(flat)} flat (`{flat[0]}`..`{flat[-1]}`), answered "
        "with one token (`data.max_response_length=1`) by a tiny random Qwen2 (hidden 32, 2 layers, "
        f"{spec.get('parameters', '?')} parameters, {len(spec['answers'])}-token vocabulary) {seeing} "
        f"(design `{design.key}`). The answer is that token's text ({len(set(spec['answers']))} distinct answers; "
        "the special tokens and the newline all read as the empty answer). True quality: N(0, 1) draws per "
        f"informative prompt and answer (fixed, task seed {spec['task_seed']}), 0 for every answer of a flat "
        f"prompt. Observed reward: true quality plus N(0, {noise:g}^2) noise (a learned reward model's noise), "
        "drawn per sample from a stream seeded by the run seed and the sample's identity (step, prompt, sample), "
        "so every method of one seed sees the same noise for the same sample. Every step trains on "
        f"{design.prompts_per_step} prompts (half informative, half flat, in an order drawn by the run seed) x "
        f"{design.samples} samples, one optimizer step (AdamW, lr {design.lr:g} unless the table says "
        "otherwise), the validated recipe of each estimator otherwise (KL loss 0.01; REINFORCE++: KL in the "
        "reward). Runs are deterministic ([same seed, same run](../../cpu-backend.md#same-seed-same-run)): one "
        "seed fixes the data order, the sampling streams and the noise, and the model starts from the same "
        "weights in every run, so the methods' runs of one seed are paired.")


def command_line(design: str, records: list[dict], control: tuple[dict, ...] = ()) -> str:
    """The one command that reproduces these runs' report (it reuses the runs finished in its ``--out``)."""
    def count(runs) -> int:
        return len({r["seed"] for r in runs})

    design_record, lrs = noisy_task.DESIGNS[design], sorted({r["lr"] for r in records})
    methods = sorted({r["method"]["key"] for r in records}, key=[m.key for m in METHODS].index)
    words = ["verl-rfpp curves --task noisy", f"--design {design}", "--out DIR", f"--steps {records[0]['steps']}",
             f"--seeds {count(records)}"]
    if control:
        words.append(f"--control {count(control)}")
    if lrs != [design_record.lr]:
        words.append("--lrs " + " ".join(f"{lr:g}" for lr in lrs))
    if set(methods) != set(design_record.methods):
        words.append("--methods " + " ".join(methods))
    if records[0]["noise_std"] != NOISE_STD:
        words.append(f"--noise-std {records[0]['noise_std']:g}")
    return " ".join(words)


def report(records: list[dict], spec: dict, control: tuple[dict, ...] = ()) -> str:
    """report.md's measured part: the task, per lr the summary table, GRPO against our baseline
    seed by seed (paired), the noise-free control and the noise's own effect, the flat-informative
    gap per step, and which estimator ran."""
    start, best = initial(spec), best_quality(spec)
    table = summarize(records, start)
    verdict = verdicts(table)
    clean = summarize(list(control), start) if control else {}
    steps, noise = records[0]["steps"], records[0]["noise_std"]
    seeds = max(len(row["seeds"]) for rows in table.values() for row in rows.values())
    lines = [
        f"# Noisy rewards on prompts with nothing to learn, in verl's real trainer (CPU): design `{spec['design']}`",
        "",
        f"Written by `{command_line(spec['design'], records, control)}`: "
        f"{len({r['method']['key'] for r in records})} methods x "
        f"{seeds} seeds x {steps} steps at lr {', '.join(sorted(table))} of verl 0.9.1's v1 trainer on the CPU "
        "backend ([docs/cpu-backend.md](../../cpu-backend.md)), with reward noise and without. Every number here "
        f"was read back from verl's `tensorboard` logger's event files. Schema of "
        f"`{output_name(spec['design'], 'results.json')}`: "
        "[schema.md](schema.md).",
        "",
    ]
    if verdict:
        lines += ["## Verdict", ""]
        for lr, v in verdict.items():
            lines += _verdict_lines(lr, v, table[lr], clean.get(lr, {}))
    lines += [
        "## The task",
        "",
        _task_text(spec, noise),
        "",
        "Measured every step by the CPU backend's metrics probe (`noisy_task.probe`, in verl's driver, "
        "added to the step's metrics): exact functionals of the policy after the step's update (the rollout "
        "server's weights, pushed by verl after the update; `noisy/probe_policy_step` records the step they "
        "belong to), computed from the answer distribution pi(. | prompt) over the whole vocabulary, no "
        "sampling: `noisy/informative_true_reward` (mean over informative prompts of E_pi[q]), "
        "`noisy/flat_entropy` (mean entropy of the flat prompts' answer distribution, nats), "
        "`noisy/flat_kl_from_start` (mean KL(pi || pi_start) on flat prompts: how far their answer "
        "distribution moved, where nothing was to be learned), `noisy/flat_informative_tv` (mean total "
        "variation distance between a flat and an informative prompt's answer distributions, over all "
        "pairs: 0 for a policy that answers every prompt alike). From the step's batch: `noisy/flat_adv_rms`, "
        "`noisy/informative_adv_rms` (root mean square of the advantages verl trained on, flat and "
        "informative rows) and `noisy/noise_std_sampled` (std of observed minus true reward of the step's "
        "samples: the noise verl saw).",
        "",
        f"At the start (every run): informative true reward {start[P + 'informative_true_reward']:+.3f} (best "
        f"answer of each prompt {best:.3f}; the best a prompt-blind policy can earn, one answer for every "
        f"prompt, {prompt_blind_quality(spec):.3f}), flat entropy {start[P + 'flat_entropy']:.3f} (uniform: ln "
        f"{len(spec['answers'])} = {math.log(len(spec['answers'])):.3f}), flat-informative gap "
        f"{start[P + 'flat_informative_tv']:.3f}.",
        "",
    ]
    for lr, rows in table.items():
        lines += [f"## lr {lr}, reward noise {noise:g}", "",
                  f"Mean ± sample std over seeds; reward, entropy, KL and gap over the last {WINDOW} steps, "
                  "advantage rms and noise over all steps.", "",
                  "| method | informative true reward | flat entropy | flat entropy drop | flat KL from start "
                  "| informative KL from start | flat-informative gap | flat adv rms | informative adv rms "
                  "| noise std seen | s per run |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for row in rows.values():
            lines.append(f"| {row['label']} | {_cell(row, 'informative_true_reward')} | {_cell(row, 'flat_entropy')} "
                         f"| {_cell(row, 'flat_entropy_drop')} | {_cell(row, 'flat_kl_from_start', 4)} "
                         f"| {_cell(row, 'informative_kl_from_start', 4)} | {_cell(row, 'flat_informative_tv')} "
                         f"| {_cell(row, 'flat_adv_rms')} | {_cell(row, 'informative_adv_rms')} "
                         f"| {_cell(row, 'noise_std_sampled')} | {row['seconds']:.0f} |")
        v = verdict.get(lr)
        if v:
            lines += ["", f"GRPO minus our REINFORCE++-baseline, paired by seed (seeds {v['seeds']}):"]
            lines += [f"- {LABELS[name]}: {_diff(v[name])}; GRPO's is {v[name]['ratio']:.2f}x the baseline's."
                      for name in PAIRED_MEASURES]
            lines.append(
                f"- In every seed: GRPO's flat advantages larger (noise presented as signal): "
                f"{'yes' if v['noise_as_signal'] else 'no'}; GRPO's flat prompts further from the start: "
                f"{'yes' if v['flat_moved_more'] else 'no'}; GRPO's informative true reward lower: "
                f"{'yes' if v['informative_reward_lower_for_grpo'] else 'no'}.")
            if "control" in v:
                lines += ["", "Control, ours minus verl's REINFORCE++-baseline, paired by seed:"]
                lines += [f"- {LABELS[name]}: {_diff(v['control'][name])}" for name in NOISE_MEASURES]
        lines += ["", f"![noisy rewards at lr {lr}]({output_name(spec['design'], f'noisy_lr{float(lr):g}.png')})", ""]
    if control:
        effect = noise_effect(table, clean)
        lines += ["## Noise-free control", "",
                  "The same runs (same seeds: data order, sampling streams, start) with reward noise 0: every flat "
                  "group's rewards are then equal, so every method gives the flat prompts advantage 0, and "
                  "whatever moves them is the shared parameters carrying over what the informative prompts "
                  "learn. The noisy run minus this control, seed by seed, is what the noise itself did.", ""]
        for lr, rows in clean.items():
            lines += [f"lr {lr}, noise 0:", "", "| method (noise 0) | informative true reward | flat entropy | "
                      "flat KL from start | flat-informative gap | flat adv rms |",
                      "| --- | --- | --- | --- | --- | --- |"]
            for row in rows.values():
                lines.append(f"| {row['label']} | {_cell(row, 'informative_true_reward')} | "
                             f"{_cell(row, 'flat_entropy')} | {_cell(row, 'flat_kl_from_start', 4)} | "
                             f"{_cell(row, 'flat_informative_tv')} | {_cell(row, 'flat_adv_rms')} |")
            lines += ["", "Informative true reward at the end, per seed (noise 0): " + "; ".join(
                f"{row['label']} {', '.join(f'{x:.3f}' for x in row['informative_true_reward']['per_seed'])}"
                for row in rows.values()) + ".", ""]
            for key, cell in effect.get(lr, {}).items():
                lines.append(f"{rows[key]['label']}, noisy minus noise-free (seeds {cell['seeds']}):")
                lines += [f"- {LABELS[name]}: {_diff(cell[name])}" for name in NOISE_MEASURES] + [""]
            picture = output_name(spec["design"], f"noise_free_lr{float(lr):g}.png")
            lines += [f"![noise-free control at lr {lr}]({picture})", ""]
        lines += ["The flat prompts' answer distributions against the informative ones' (flat-informative gap, "
                  "mean (min..max) over seeds), step by step:", ""]
        lines += _gap_table(list(control), "noise 0") + [""] + _gap_table(records, f"noise {noise:g}") + [""]
    lines += ["## Which estimator ran", "",
              "As in [the demo task's curves](../report.md): ours with the plugin loaded, verl's with "
              "`VERL_USE_EXTERNAL_PLUGINS=none`, proven per run from the run trace:", ""]
    for lr, rows in table.items():
        for row in rows.values():
            lines.append(f"- lr {lr}, {row['label']}: {'; '.join(row['proof'])}")
    for lr, rows in clean.items():
        for row in rows.values():
            lines.append(f"- lr {lr}, noise 0, {row['label']}: {'; '.join(row['proof'])}")
    return "\n".join(lines) + "\n"


def write(out: Path, records: list[dict], spec: dict, notes: str = "", control: tuple[dict, ...] = ()) -> None:
    """results.json (settings, the start, the summary, the verdicts, the noise-free ``control``'s
    summary and the noise's effect, every run's kept metrics), one plot per lr and noise level and
    report.md (``notes`` appended), named by ``output_name``."""
    out.mkdir(parents=True, exist_ok=True)
    start = initial(spec)
    table = summarize(records, start)
    kept = [{**record, "metrics": {tag: values for tag, values in record["metrics"].items() if tag in KEPT}}
            for record in (*records, *control)]
    design = noisy_task.DESIGNS[spec["design"]]
    settings = {"design": design.key,
                "prompts": [{"text": row["text"], "kind": row["kind"]} for row in spec["prompts"]],
                "answers": spec["answers"], "task_seed": spec["task_seed"], "parameters": spec.get("parameters"),
                "noise_std": records[0]["noise_std"], "steps": records[0]["steps"],
                "prompts_per_step": design.prompts_per_step, "samples_per_prompt": design.samples, "window": WINDOW,
                "quality": {row["text"]: row["quality"] for row in spec["prompts"]}}
    clean = summarize(list(control), start) if control else {}
    results = {"settings": settings, "initial": start, "best_quality": best_quality(spec),
               "prompt_blind_quality": prompt_blind_quality(spec), "summary": table,
               "verdicts": verdicts(table), "control_summary": clean, "noise_effect": noise_effect(table, clean),
               "runs": kept}
    (out / output_name(design.key, "results.json")).write_text(json.dumps(results, indent=1))
    plots(out, [*records, *control], start, best_quality(spec), prompt_blind_quality(spec), design.key)
    text = report(records, spec, control)
    (out / output_name(design.key, "report.md")).write_text(text + (("\n" + notes.strip() + "\n") if notes else ""))


QUICK = {"steps": 1, "seeds": 1, "methods": ("ours_baseline",)}  # a smoke run: one update, probed after it


def problem(args) -> Optional[str]:
    """Why ``curves --task noisy`` refuses these arguments (unknown methods, a learning rate not
    above 0, a negative noise std), or None."""
    if unknown := method_problem(args.methods):
        return unknown
    lrs = tuple(args.lrs) if args.lrs else (noisy_task.DESIGNS[args.design].lr,)
    if not (lrs and all(lr > 0 for lr in lrs) and args.noise_std >= 0):  # --steps, --seeds: at parse time
        return (f"verl-rfpp curves --task noisy: every --lrs value {list(lrs)} must be positive and --noise-std "
                f"{args.noise_std} non-negative")
    return None


def command(args, echo: Callable[[str], None]) -> int:
    """``verl-rfpp curves --task noisy`` (arguments ``problem`` accepts): run (or reuse) every lr x
    seed x method, then write results.json, the plots and report.md into ``--out``. ``--quick``:
    1 step, 1 seed, our REINFORCE++-baseline unless ``--methods`` says otherwise."""
    out, design = Path(args.out), noisy_task.DESIGNS[args.design]
    methods = methods_of(tuple(args.methods) if args.methods else QUICK["methods"] if args.quick else design.methods)
    steps, seeds = (QUICK["steps"], QUICK["seeds"]) if args.quick else (args.steps, args.seeds)
    lrs = tuple(args.lrs) if args.lrs else (design.lr,)
    echo(f"verl-rfpp curves --task noisy --design {design.key}: {len(methods)} methods x {seeds} seeds x {steps} "
         f"steps x lr {', '.join(f'{lr:g}' for lr in lrs)}, reward noise std {args.noise_std:g}; "
         f"runs in {out / 'runs'}")
    records = run_all(out, design, steps, seeds, lrs, methods, args.noise_std, progress=echo)
    control = ()
    if args.control:
        control = tuple(run_all(out, design, steps, args.control, lrs, methods_of(design.control_methods), 0.0,
                                progress=echo))
    spec = noisy_task.build_assets(assets_dir(out, design), design)
    write(out, records, spec, control=control)
    report_md, results_json = (out / output_name(design.key, name) for name in ("report.md", "results.json"))
    echo(report_md.read_text())
    echo(f"written: {report_md}, {results_json}, {out}/{output_name(design.key, 'nois*_lr*.png')}")
    return 0
