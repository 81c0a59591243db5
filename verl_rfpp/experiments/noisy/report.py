"""The noisy task's results.json, plots and report.md, and docs/bandit.md's paragraph on each arm:
the report's sections are ``noisy.sections``' sentences, assembled here with the task, the command
line and the tables; every yes / no / against / mixed they say is ``noisy.analysis``'s rule applied
to the runs (``noisy.analysis.answer``), so the words cannot drift from ``results.json``."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from verl_rfpp.experiments.noisy import task as noisy_task
from verl_rfpp.experiments.noisy.analysis import (
    CARRIES,
    CHANNEL_OF,
    CHANNELS,
    GRPO,
    LEVELS,
    NOISE_MEASURES,
    OURS,
    PAIRED_MEASURES,
    WINDOW,
    P,
    arm_of,
    best_quality,
    channels,
    group,
    group_noise,
    initial,
    matched,
    matched_noise_part,
    noise_effect,
    noise_part,
    prompt_blind_quality,
    summarize_noisy,
    verdicts,
)
from verl_rfpp.experiments.noisy.runs import NOISE_STD, optimizer_of
from verl_rfpp.experiments.noisy.sections import (
    BY_CONSTRUCTION,
    LABELS,
    bandit_table,
    caveat_lines,
    cell_text,
    channel_lines,
    diff_text,
    interval_text,
    matched_lines,
    matched_noise_lines,
    noise_part_lines,
    verdict_lines,
)
from verl_rfpp.experiments.runs import METHODS
from verl_rfpp.experiments.series import band, mean, seed_series, series

KEPT = (*noisy_task.METRICS, "critic/score/mean", "cpu/advantages_std", "actor/entropy", "actor/kl_loss",
        "actor/reward_kl_penalty", "response_length/mean", "timing_s/step")
GAP_STEPS = (1, 5, 10, 20, 30, 40, 60, 80)
OWN_RATE = "own-rate"  # the file names' part for runs paired across rates (an ``arm``, ``noisy.analysis.arm_of``)


def output_name(design: str, name: str, optimizer: str = "adamw", armed: bool = False) -> str:
    """The name under ``--out`` of a file the ``design`` writes with ``optimizer``: the separate
    design's AdamW runs' as named, another design's prefixed with its key, another optimizer's
    with its name, runs paired across rates (``armed``) with ``OWN_RATE`` (``shared-report.md``,
    ``sgd-report.md``, ``sgd-own-rate-report.md``), so one ``--out`` holds them all."""
    parts = [*([design] if design != noisy_task.SEPARATE.key else []), *([optimizer] if optimizer != "adamw" else []),
             *([OWN_RATE] if armed else [])]
    return "-".join([*parts, name])


def armed(records: list[dict]) -> bool:
    """Whether ``records`` pair methods run at different rates (each carries its ``arm``)."""
    return any("arm" in r for r in records)


def lr_name(key: str) -> str:
    """An arm key as a file name's part: a rate as ``:g`` writes it, else its letters and digits."""
    try:
        return f"{float(key):g}"
    except ValueError:
        return re.sub(r"[^0-9a-z.]+", "-", key.lower()).strip("-")


def noisy_plots(out: Path, records: list[dict], start: dict[str, float], best: float, blind: float,
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
    for (lr, noise), methods in group_noise(records).items():
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
        figure.suptitle(f"reward noise N(0, {noise:g}^2), lr {lr}: line mean over seeds, band min..max", fontsize=10)
        figure.tight_layout()
        path = out / output_name(design, f"noisy_lr{lr_name(lr)}.png" if noise else f"noise_free_lr{lr_name(lr)}.png",
                                 optimizer_of(records[0]), armed(records))
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def bandit_paragraph(results: dict) -> str:
    """docs/bandit.md's paragraph on the verl runs of one arm, from ``results`` (a results.json of the
    separate design: AdamW's, SGD's at one shared rate, or SGD's at each method's own rate): each word
    the rule's, each number read from it with its 95% t-interval."""
    lr = next(iter(results["verdicts"]))
    v = results["verdicts"][lr]
    part = results.get("noise_part", {}).get(lr)
    optimizer = optimizer_of(results["runs"][0])
    own_rate = armed(results["runs"])
    report = output_name(results["settings"]["design"], "report.md", optimizer, own_rate)
    if optimizer == "adamw":
        text = ("In verl's real trainer, with a small network and AdamW instead of a table and SGD "
                f"([curves/noisy/{report}](curves/noisy/{report}), {len(v['seeds'])} paired seeds), the report's rule "
                "gives: GRPO's flat advantages are full-size there too")
    elif own_rate:
        text = (f"The SGD arm at each method's own rate ([curves/noisy/{report}](curves/noisy/{report}), "
                f"{len(v['seeds'])} paired seeds, lr {lr}: ours keeps the shared rate, GRPO's equalizes the two "
                "methods' informative advantage rms in the shared-rate arm's noise-free runs, a criterion fixed "
                "before any run at it), the same rule gives: GRPO's flat advantages are full-size")
    else:
        label = noisy_task.OPTIMIZER_LABEL[optimizer]
        text = (f"The SGD arm at one shared rate: with {label}, the bandit's optimizer, "
                f"on the same network ([curves/noisy/{report}](curves/noisy/{report}), {len(v['seeds'])} paired seeds, "
                f"one shared rate lr {float(lr):g} for both methods, chosen noise-free before any noisy run), the same "
                "rule gives: GRPO's flat advantages are full-size")
    text += f" (rms {v['flat_adv_rms']['ratio']:.2f}x the baseline's, by construction)"
    if part:
        head = part["answers"]
        text += (f". The claim asks what the noise does, so the headline is the noise's part (GRPO minus the "
                 "baseline with noise, minus the same without, seed by seed; mean and 95% t-interval): "
                 f"**{part['plain']}**. The noise slowed GRPO's informative learning more than the baseline's: "
                 f"{head['informative_reward_lower_for_grpo']} "
                 f"({interval_text(part['informative_true_reward']['noise_part'], 2)}, primary sign-flip p "
                 f"{part['primary']['informative_true_reward']:.3f}); the noise moved GRPO's "
                 f"flat prompts further than the baseline's: {head['flat_moved_more']} "
                 f"({interval_text(part['flat_kl_from_start']['noise_part'], 2)}, primary sign-flip p "
                 f"{part['primary']['flat_kl_from_start']:.3f}). Without noise GRPO's informative true reward was "
                 f"already {interval_text(part['informative_true_reward']['noise_free'], 2)} from the baseline's")
    text += (f". With noise alone, GRPO minus the baseline: informative true reward "
             f"{interval_text(v['informative_true_reward'], 2)} ({v['answers']['informative_reward_lower_for_grpo']}), "
             f"flat KL from the start {interval_text(v['flat_kl_from_start'], 2)} ({v['answers']['flat_moved_more']}).")
    cells = results.get("channels", {}).get(lr, {})
    if all(key in cells for key in (GRPO, OURS)):
        text += (" A probe in verl's driver says through which parameters the flat prompts moved (its rule: a "
                 f"channel carries the movement when it alone keeps at least {CARRIES:.0%} of the flat KL in every "
                 "seed): " + "; ".join(
                     f"{CHANNEL_OF[name]}: {cells[GRPO][name]['carries']} for GRPO, {cells[OURS][name]['carries']} "
                     "for the baseline" for name in CHANNELS) + ".")
    return text + " That report compares the two claim by claim, matched progress at every level included."


def _gap_table(records: list[dict], title: str) -> list[str]:
    """Per method, the flat-informative total variation gap at GAP_STEPS, mean (min..max) over seeds."""
    if not all(series(r, P + "flat_informative_tv") for r in records):
        return [f"({title}: not probed in these runs)"]
    steps = [s for s in GAP_STEPS if s <= records[0]["steps"]]
    lines = [f"| {title} | " + " | ".join(f"step {s}" for s in steps) + " |",
             "| --- |" + " --- |" * len(steps)]
    for runs in group(records)[arm_of(records[0])].values():
        cells = []
        for step in steps:
            values = [series(r, P + "flat_informative_tv")[step - 1] for r in runs]
            cells.append(f"{mean(values):.3f} ({min(values):.3f}..{max(values):.3f})")
        lines.append(f"| {runs[0]['method']['label']} ({len(runs)} seeds) | " + " | ".join(cells) + " |")
    return lines
def _task_text(spec: dict, noise: float, optimizer: str = "adamw") -> str:
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
        f"{design.samples} samples, one optimizer step ({noisy_task.OPTIMIZER_LABEL[optimizer]}, lr "
        f"{design.lr_of(optimizer):g} unless the table says "
        "otherwise), the validated recipe of each estimator otherwise (KL loss 0.01; REINFORCE++: KL in the "
        "reward). Runs are deterministic ([same seed, same run](../../cpu-backend.md#same-seed-same-run)): one "
        "seed fixes the data order, the sampling streams and the noise, and the model starts from the same "
        "weights in every run, so the methods' runs of one seed are paired.")


def command_line(design: str, records: list[dict], control: tuple[dict, ...] = ()) -> str:
    """The commands that reproduce these runs' report in one ``--out`` (each reuses the runs
    finished there, and the report covers every finished run): one per distinct seed count, the
    methods run that many seeds or more, the fewest first."""
    def seeds_of(runs: list[dict]) -> dict[str, int]:
        found: dict[str, set] = {}
        for r in runs:
            found.setdefault(r["method"]["key"], set()).add(r["seed"])
        return {key: len(seeds) for key, seeds in found.items()}

    design_record, lrs = noisy_task.DESIGNS[design], sorted({r["lr"] for r in records})
    order = [m.key for m in METHODS]
    noisy_counts, clean_counts = seeds_of(records), seeds_of(list(control))
    commands = []
    for count in sorted(set(noisy_counts.values())):
        methods = sorted((key for key, n in noisy_counts.items() if n >= count), key=order.index)
        words = ["verl-rfpp curves --task noisy", f"--design {design}", "--out DIR", f"--steps {records[0]['steps']}",
                 f"--seeds {count}"]
        clean = [clean_counts[key] for key in methods if key in clean_counts]
        if clean:
            words.append(f"--control {min(min(clean), count)}")
        if optimizer_of(records[0]) != "adamw":
            words.append(f"--optimizer {optimizer_of(records[0])}")
        if lrs != [design_record.lr_of(optimizer_of(records[0]))]:
            words.append("--lrs " + " ".join(f"{lr:g}" for lr in lrs))
        if set(methods) != set(design_record.methods):
            words.append("--methods " + " ".join(methods))
        if records[0]["noise_std"] != NOISE_STD:
            words.append(f"--noise-std {records[0]['noise_std']:g}")
        commands.append(f"`{' '.join(words)}`")
    return ", then ".join(commands)


def _runs_phrase(records: list[dict]) -> str:
    """"verl GRPO, ours REINFORCE++-baseline x 8 seeds, verl REINFORCE++-baseline x 5 seeds"."""
    counts: dict[int, list[str]] = {}
    for runs in group(records)[arm_of(records[0])].values():
        counts.setdefault(len(runs), []).append(runs[0]["method"]["label"])
    return ", ".join(f"{' and '.join(labels)} x {n} seeds" for n, labels in sorted(counts.items(), reverse=True))


PROBES = (
    "Measured every step by the CPU backend's metrics probe (`noisy.task.probe`, in verl's driver, "
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
    "samples: the noise verl saw).")


def noisy_report_text(records: list[dict], spec: dict, control: tuple[dict, ...] = (),
                      written_by: str = "") -> str:
    """report.md's generated part: the verdict, what the noise caused, matched progress, the
    caveats, the bandit compared claim by claim, the task, per lr the summary table and every
    paired difference, the noise-free control, the flat-informative gap per step, which estimator
    ran."""
    start, best = initial(spec), best_quality(spec)
    table = summarize_noisy(records, start)
    verdict = verdicts(table)
    clean = summarize_noisy(list(control), start) if control else {}
    effect, part, progress = noise_effect(table, clean), noise_part(table, clean), matched(records)
    matched_part = matched_noise_part(records, list(control))
    moved = channels(table)
    table_lrs = sorted(table)
    steps, noise, optimizer = records[0]["steps"], records[0]["noise_std"], optimizer_of(records[0])
    rates = sorted({r["lr"] for r in (*records, *control)})
    named = ("" if optimizer == "adamw" else f", {noisy_task.OPTIMIZER_LABEL[optimizer]}") + (
        f", each method at its own rate (lr {', '.join(table_lrs)})" if armed(records) else
        f", one shared rate for every method (lr {rates[0]:g})" if optimizer != "adamw" and len(rates) == 1 else "")
    lines = [
        f"# Noisy rewards on prompts with nothing to learn, in verl's real trainer (CPU): design `{spec['design']}`"
        + named,
        "",
        f"Written by {written_by or command_line(spec['design'], records, control) + ' in one DIR'}: "
        f"{_runs_phrase(records)}, "
        f"{steps} steps at lr {', '.join(sorted(table))} of verl 0.9.1's v1 trainer on the CPU "
        "backend ([docs/cpu-backend.md](../../cpu-backend.md)), with reward noise and without. Every number here "
        f"was read back from verl's `tensorboard` logger's event files. Schema of "
        f"`{output_name(spec['design'], 'results.json', optimizer, armed(records))}`: "
        "[schema.md](schema.md).",
        "",
    ]
    for lr, v in verdict.items():
        lines += ["## Verdict", ""] + verdict_lines(lr, v, table[lr], clean.get(lr, {}), part.get(lr, {}), optimizer)
        lines += noise_part_lines(lr, part.get(lr, {})) + matched_noise_lines(lr, matched_part.get(lr, {}))
        lines += matched_lines(lr, progress.get(lr, {}))
        lines += channel_lines(lr, moved.get(lr, {}), explain=optimizer == "adamw")
        lines += caveat_lines(lr, v, table[lr])
        lines += bandit_table(lr, v, table[lr], clean.get(lr, {}), effect.get(lr, {}), part.get(lr, {}), best, steps,
                               spec, optimizer=noisy_task.OPTIMIZER_LABEL[optimizer])
    lines += [
        "## The task",
        "",
        _task_text(spec, noise, optimizer),
        "",
        PROBES,
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
                  "| method | seeds | informative true reward | flat entropy | flat entropy drop | flat KL from start "
                  "| informative KL from start | flat-informative gap | flat adv rms | informative adv rms "
                  "| noise std seen | s per run |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for row in rows.values():
            lines.append(f"| {row['label']} | {len(row['seeds'])} | {cell_text(row, 'informative_true_reward')} "
                         f"| {cell_text(row, 'flat_entropy')} "
                         f"| {cell_text(row, 'flat_entropy_drop')} | {cell_text(row, 'flat_kl_from_start', 4)} "
                         f"| {cell_text(row, 'informative_kl_from_start', 4)} "
                         f"| {cell_text(row, 'flat_informative_tv')} "
                         f"| {cell_text(row, 'flat_adv_rms')} | {cell_text(row, 'informative_adv_rms')} "
                         f"| {cell_text(row, 'noise_std_sampled')} | {row['seconds']:.0f} |")
        v = verdict.get(lr)
        if v:
            lines += ["", f"GRPO minus our REINFORCE++-baseline, paired by seed (seeds {v['seeds']}):"]
            lines += [f"- {LABELS[name]}: {diff_text(v[name], tests=name not in BY_CONSTRUCTION)}"
                      + (f"; GRPO's is {v[name]['ratio']:.2f}x the baseline's." if name in BY_CONSTRUCTION else ".")
                      for name in PAIRED_MEASURES]
            if "control" in v:
                lines += ["", "Control, ours minus verl's REINFORCE++-baseline, paired by seed (seeds "
                          f"{v['control']['flat_kl_from_start']['seeds']}; the same method, two implementations):"]
                lines += [f"- {LABELS[name]}: {diff_text(v['control'][name])}" for name in NOISE_MEASURES]
        picture = output_name(spec["design"], f"noisy_lr{lr_name(lr)}.png", optimizer, armed(records))
        lines += ["", f"![noisy rewards at lr {lr}]({picture})", ""]
    if control:
        lines += ["## Noise-free control", "",
                  "The same runs (same seeds: data order, sampling streams, start) with reward noise 0: every flat "
                  "group's rewards are then equal, so every method gives the flat prompts advantage 0, and "
                  "whatever moves them is the shared parameters carrying over what the informative prompts "
                  "learn. The noisy run minus this control, seed by seed, is what the noise itself did.", ""]
        for lr, rows in clean.items():
            lines += [f"lr {lr}, noise 0:", "", "| method (noise 0) | seeds | informative true reward | flat entropy | "
                      "flat KL from start | flat-informative gap | flat adv rms |",
                      "| --- | --- | --- | --- | --- | --- | --- |"]
            for row in rows.values():
                lines.append(f"| {row['label']} | {len(row['seeds'])} | {cell_text(row, 'informative_true_reward')} | "
                             f"{cell_text(row, 'flat_entropy')} | {cell_text(row, 'flat_kl_from_start', 4)} | "
                             f"{cell_text(row, 'flat_informative_tv')} | {cell_text(row, 'flat_adv_rms')} |")
            lines += ["", "Informative true reward at the end, per seed (noise 0): " + "; ".join(
                f"{row['label']} {', '.join(f'{x:.3f}' for x in row['informative_true_reward']['per_seed'])}"
                for row in rows.values()) + ".", ""]
            for key, cell in effect.get(lr, {}).items():
                lines.append(f"{rows[key]['label']}, noisy minus noise-free (seeds {cell['seeds']}):")
                lines += [f"- {LABELS[name]}: {diff_text(cell[name])}" for name in NOISE_MEASURES] + [""]
            picture = output_name(spec["design"], f"noise_free_lr{lr_name(lr)}.png", optimizer, armed(records))
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


def kept(record: dict) -> dict:
    """A run's record with only the metrics results.json keeps (``KEPT``: all the report reads)."""
    return {**record, "metrics": {tag: values for tag, values in record["metrics"].items() if tag in KEPT}}


def results(records: list[dict], spec: dict, control: tuple[dict, ...] = ()) -> dict:
    """results.json: settings, the start, the summary, the verdicts (with each claim's word), the
    noise-free ``control``'s summary, the noise's effect and part, matched progress, every run's
    kept metrics."""
    start = initial(spec)
    table = summarize_noisy(records, start)
    design = noisy_task.DESIGNS[spec["design"]]
    settings = {"design": design.key,
                "prompts": [{"text": row["text"], "kind": row["kind"]} for row in spec["prompts"]],
                "answers": spec["answers"], "task_seed": spec["task_seed"], "parameters": spec.get("parameters"),
                "noise_std": records[0]["noise_std"], "steps": records[0]["steps"],
                "prompts_per_step": design.prompts_per_step, "samples_per_prompt": design.samples, "window": WINDOW,
                "levels": list(LEVELS), "quality": {row["text"]: row["quality"] for row in spec["prompts"]}}
    clean = summarize_noisy(list(control), start) if control else {}
    return {"settings": settings, "initial": start, "best_quality": best_quality(spec),
            "prompt_blind_quality": prompt_blind_quality(spec), "summary": table, "verdicts": verdicts(table),
            "control_summary": clean, "noise_effect": noise_effect(table, clean),
            "noise_part": noise_part(table, clean), "matched": matched(records),
            "matched_noise_part": matched_noise_part(records, list(control)), "channels": channels(table),
            "runs": [kept(record) for record in (*records, *control)]}


def load(path: Path) -> tuple[list[dict], tuple[dict, ...]]:
    """The runs of a results.json: the noisy ones and the noise-free control's."""
    saved = json.loads(Path(path).read_text())
    noise = saved["settings"]["noise_std"]
    return ([r for r in saved["runs"] if r["noise_std"] == noise],
            tuple(r for r in saved["runs"] if r["noise_std"] != noise))


def write_noisy_report(out: Path, records: list[dict], spec: dict, notes: str = "",
                       control: tuple[dict, ...] = (), written_by: str = "") -> None:
    """results.json, one plot per lr and noise level, report.md (``notes`` appended) and, for the
    separate design with GRPO and the baseline both run, ``bandit-paragraph.txt`` (``bandit_paragraph``:
    what docs/bandit.md says of the arm), named by ``output_name``."""
    out.mkdir(parents=True, exist_ok=True)
    design = spec["design"]
    start = initial(spec)
    optimizer = optimizer_of(records[0])
    named = {file: out / output_name(design, file, optimizer, armed(records))
             for file in ("results.json", "report.md", "bandit-paragraph.txt")}
    dumped = json.dumps(results(records, spec, control), indent=1)
    named["results.json"].write_text(dumped)
    noisy_plots(out, [*records, *control], start, best_quality(spec), prompt_blind_quality(spec), design)
    text = noisy_report_text(records, spec, control, written_by)
    named["report.md"].write_text(text + (("\n" + notes.strip() + "\n") if notes else ""))
    saved = json.loads(dumped)  # as a reader of results.json has it (the paragraph's test reads the file)
    if design == noisy_task.SEPARATE.key and saved["verdicts"]:  # GRPO and the baseline both ran: docs/bandit.md
        named["bandit-paragraph.txt"].write_text(bandit_paragraph(saved) + "\n")
