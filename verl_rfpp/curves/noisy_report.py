"""The noisy task's results.json, plots and report.md, and docs/bandit.md's paragraph on it: every
yes / no / mixed they say is ``noisy_analysis``'s rule applied to the runs (``noisy_analysis.answer``),
so the words cannot drift from ``results.json``."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from verl_rfpp.curves import noisy_task
from verl_rfpp.curves.noisy_analysis import (
    AGAINST,
    CARRIES,
    CHANNEL_OF,
    CHANNELS,
    CLAIMS,
    GRPO,
    LEARNED,
    LEVELS,
    NOISE_MEASURES,
    OURS,
    PAIRED_MEASURES,
    PRIMARY,
    RULE_COMMIT,
    TWIN_NOTE,
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
    rows_explanation,
    summarize_noisy,
    verdicts,
)
from verl_rfpp.curves.noisy_runs import NOISE_STD, optimizer_of
from verl_rfpp.curves.runs import METHODS
from verl_rfpp.curves.series import band, mean, seed_series, series
from verl_rfpp.curves.stats import bootstrap_interval, t_interval

KEPT = (*noisy_task.METRICS, "critic/score/mean", "cpu/advantages_std", "actor/entropy", "actor/kl_loss",
        "actor/reward_kl_penalty", "response_length/mean", "timing_s/step")
GAP_STEPS = (1, 5, 10, 20, 30, 40, 60, 80)
BY_CONSTRUCTION = ("flat_adv_rms", "informative_adv_rms")  # GRPO's rms is sqrt(15/16) on every group: no test
LABELS = {"flat_entropy_drop": "flat entropy drop (nats)", "flat_kl_from_start": "flat KL from start",
          "informative_true_reward": "informative true reward", "flat_adv_rms": "flat advantage rms",
          "informative_adv_rms": "informative advantage rms"}


OWN_RATE = "own-rate"  # the file names' part for runs paired across rates (an ``arm``, ``noisy_analysis.arm_of``)


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


def _cell(row: dict, name: str, digits: int = 3) -> str:
    if name not in row:
        return "not probed"
    return f"{row[name]['mean']:.{digits}f} ± {row[name]['std']:.{digits}f}"


def _diff(d: dict, digits: int = 3, tests: bool = True) -> str:
    """A paired difference in one phrase: mean ± std, the per-seed values, the sign count, and
    (``tests``) the exact sign-flip and sign tests' p and the t interval."""
    values = (f"{d['diff_mean']:+.{digits}f} ± {d['diff_std']:.{digits}f} (per seed "
              f"{', '.join(f'{x:+.{digits}f}' for x in d['per_seed'])}; {d['positive']} of {len(d['per_seed'])} "
              "positive")
    if not tests:
        return values + "; by construction, no test)"
    interval = (f"95% t-interval [{d['t_95'][0]:+.{digits}f}, {d['t_95'][1]:+.{digits}f}]" if d["t_95"]
                else "no t-interval")
    return f"{values}; sign-flip p = {d['sign_flip_p']:.3f}, sign test p = {d['sign_test_p']:.3f}; {interval})"


def _count(d: dict, sign: int) -> str:
    """How many seeds have ``sign``: "4 of 5 seeds"."""
    return f"{d['positive'] if sign > 0 else d['negative']} of {len(d['per_seed'])} seeds"


def smallest_p(n: int) -> float:
    """The smallest two-sided p of the exact sign and sign-flip tests over ``n`` nonzero differences."""
    return min(1.0, 2 / 2 ** n)


def _interval(d: dict, digits: int = 3) -> str:
    """A paired difference's mean and 95% t-interval: "-0.400 [-0.720, -0.079]"."""
    if not d["t_95"]:
        return f"{d['diff_mean']:+.{digits}f} (no t-interval)"
    return f"{d['diff_mean']:+.{digits}f} [{d['t_95'][0]:+.{digits}f}, {d['t_95'][1]:+.{digits}f}]"


def bootstrap_ratios(part: dict) -> dict[str, float]:
    """Per primary endpoint, the width of the exact percentile bootstrap interval of the noise's
    part's mean over the width of its t interval (``stats``): how much narrower a bootstrap would
    have made the intervals of these runs."""
    out = {}
    for name in PRIMARY:
        diffs = part[name]["noise_part"]["per_seed"]
        boot, t = bootstrap_interval(diffs), t_interval(diffs)
        if boot and t and t[1] > t[0]:
            out[name] = (boot[1] - boot[0]) / (t[1] - t[0])
    return out


def rule_text(n: int, ratios: dict[str, float]) -> str:
    """The rule's paragraph: the four words, the plain answer, the tests beside them, the bootstrap
    against the t interval (``bootstrap_ratios`` of these runs)."""
    added = f"commit {RULE_COMMIT}" if RULE_COMMIT else "the commit that added it"
    text = (
        "The rule, fixed when only seed 0 had run, before any other seed was read (commit 68f570c), with the word "
        f"**against** and the headline on the noise's part added before any own-rate SGD run (issue 52, {added}): "
        "a claim holds (**yes**) when its difference has the claimed sign in every seed, **no** when it has the "
        f"opposite sign in every seed, **against** when it has the opposite sign in at least {AGAINST} of the "
        f"seeds ({math.ceil(AGAINST * n)} of {n}) and its 95% t-interval excludes 0 on that side, **mixed** "
        "otherwise; the plain answer names each consequence the runs contradict (no or against), else it is yes "
        "when both consequences hold, partly when one does, not shown when neither does. Every yes / no / against "
        "/ mixed in this report and in docs/bandit.md is this rule's output. The two primary tests are the "
        "two-sided exact sign-flip tests of the noise's part of the two consequences' endpoints (flat KL from the "
        "start, informative true reward), named before the own-rate SGD runs; every other p in this report is "
        "exploratory. Beside each difference: the exact paired sign-flip (permutation) test, the exact sign test "
        f"(both two-sided; with {n} seeds neither can go below 2/2^{n} = {smallest_p(n):.4f}) and the 95% Student "
        "t interval of the mean difference.")
    if ratios:
        text += (" No bootstrap: with these runs' noise's parts an exact percentile bootstrap interval (every "
                 "resample enumerated) is " + ", ".join(f"{ratio:.2f} times as wide as the t interval ({LABELS[name]})"
                                                        for name, ratio in ratios.items())
                 + ", and excludes 0 whenever every seed shares a sign.")
    return text


def _learned_line(clean_rows: dict, optimizer: str) -> list[str]:
    """Whether the noise-free baseline learned, against every optimizer's learned level."""
    if OURS not in clean_rows:
        return []
    reached = clean_rows[OURS]["informative_true_reward"]["per_seed"]
    levels = "; ".join(f"at least {level:g}, the level {noisy_task.OPTIMIZER_LABEL[name]}'s rate was chosen for"
                       f"{' (this report)' if name == optimizer else ''}: "
                       f"**{'yes' if min(reached) >= level else 'no'}**" for name, level in LEARNED.items())
    return [f"- Noise-free, our REINFORCE++-baseline learned the informative prompts (true reward in every seed) "
            f"{levels} (per seed {', '.join(f'{x:.3f}' for x in reached)})."]


def _verdict_lines(lr: str, v: dict, rows: dict, clean_rows: dict, part: dict, optimizer: str) -> list[str]:
    """The plain answer at ``lr`` and each claim: with noise-free runs (``part``), the headline on the
    noise's part of each consequence (``noise_part``'s words and primary p), then GRPO minus the
    baseline with noise alone (exploratory); without them, the latter's words are the verdict."""
    words = v["answers"]
    construction = CLAIMS[0]
    d = v[construction.measure]
    grpo, ours = rows[GRPO][construction.measure]["mean"], rows[OURS][construction.measure]["mean"]
    signal = (f"- {construction.text}; endpoint {LABELS[construction.measure]}: **{words[construction.key]}**. GRPO "
              f"{grpo:.3f}, baseline {ours:.3f} ({d['ratio']:.2f}x); GRPO's larger in {_count(d, construction.sign)}. "
              f"By construction: {construction.construction}.")

    def noisy_claims() -> list[str]:
        lines = []
        for claim in CLAIMS[1:]:
            d = v[claim.measure]
            line = (f"- {claim.text}; endpoint {LABELS[claim.measure]}: **{words[claim.key]}**. GRPO "
                    f"{rows[GRPO][claim.measure]['mean']:.3f}, baseline {rows[OURS][claim.measure]['mean']:.3f}; "
                    f"GRPO minus baseline {_diff(d)}.")
            if claim.twin:
                line += (f" {LABELS[claim.twin].capitalize()}, a derived twin of the endpoint ({TWIN_NOTE}), shown "
                         f"beside it and not judged: {_diff(v[claim.twin])}.")
            lines.append(line)
        return lines

    question = ("**Does the noise, which GRPO presents as signal, move GRPO's flat prompts further and slow its "
                f"informative ones more than the baseline's, with this model, at lr {lr}? ")
    if part:
        head = part["answers"]
        lines = [question + f"{part['plain'][0].upper() + part['plain'][1:]}**: the noise's part of the flat "
                 f"prompts' movement: {head['flat_moved_more']}; of the informative prompts' slowdown: "
                 f"{head['informative_reward_lower_for_grpo']}. The noise's part is GRPO minus our "
                 "REINFORCE++-baseline with noise, minus the same without noise, seed by seed (same seeds: data "
                 f"order, sampling streams, start), over seeds {part['seeds']}; one pre-set endpoint per "
                 "consequence, its sign-flip p primary:", "", signal]
        for key in ("flat_moved_more", "informative_reward_lower_for_grpo"):
            claim = next(c for c in CLAIMS if c.key == key)
            cell = part[claim.measure]["noise_part"]
            lines.append(f"- {claim.noise_text}; the noise's part of {LABELS[claim.measure]}: **{head[key]}**. "
                         f"{_diff(cell)}; primary: sign-flip p = {part['primary'][claim.measure]:.3f}.")
        lines += _learned_line(clean_rows, optimizer)
        lines += ["", "With noise alone, GRPO minus the baseline (what a user of noisy rewards sees; it does not "
                  "separate what the noise did from what the methods do without it; words by the same rule, p "
                  "exploratory):", ""] + noisy_claims()
    else:
        lines = [question + f"{v['plain'][0].upper() + v['plain'][1:]}**: flat prompts moved further: "
                 f"{words['flat_moved_more']}; informative ones learned more slowly: "
                 f"{words['informative_reward_lower_for_grpo']}. No noise-free runs: the noise's part cannot be "
                 f"separated; GRPO against our REINFORCE++-baseline with noise, paired over seeds {v['seeds']}; "
                 "one pre-set endpoint per claim:", "", signal] + noisy_claims() + _learned_line(clean_rows, optimizer)
    return lines + ["", rule_text(len(v["seeds"]), bootstrap_ratios(part) if part else {}), ""]


def _noise_part_lines(lr: str, part: dict) -> list[str]:
    """Where the noise caused part of a difference: GRPO minus the baseline noise-free, with noise,
    and the noise's part (noisy minus noise-free, paired)."""
    if not part:
        return []
    lines = [f"## What the noise caused, lr {lr}", "",
             f"GRPO minus our REINFORCE++-baseline on each endpoint, without noise and with it, and the part the "
             f"noise caused: the noisy difference minus the noise-free one, seed by seed (the noise's effect on "
             f"GRPO minus its effect on the baseline), seeds {part['seeds']}:", ""]
    for name in ("informative_true_reward", "flat_kl_from_start"):
        cell = part[name]
        lines += [f"- {LABELS[name]}:",
                  f"  - noise-free: {_diff(cell['noise_free'])};",
                  f"  - with noise: {_diff(cell['noisy'])};",
                  f"  - the noise's part: {_diff(cell['noise_part'])}."]
    return lines + [""]


def _matched_noise_lines(lr: str, table: dict) -> list[str]:
    """The noise's part at matched informative progress, every level (exploratory)."""
    if not table:
        return []
    lines = [f"## The noise's part at matched progress, lr {lr}", "",
             "Where each run first reaches each informative true reward level (set before reading: "
             f"{', '.join(f'{x:g}' for x in LEVELS)}), GRPO minus our REINFORCE++-baseline with noise, minus the same "
             "without noise, seed by seed, over the seeds where all four runs reached the level: the flat KL from "
             "the start there (does the noise move GRPO's flat prompts further at equal progress?) and the step "
             "(does the noise slow GRPO more, positive: later?). Exploratory p.", ""]
    for level, cell in table.items():
        if not cell["seeds"]:
            lines.append(f"- informative true reward {level}: reached by all four runs in no seed.")
            continue
        missing = f"; not reached by all four in seeds {cell['not_reached']}" if cell["not_reached"] else ""
        lines.append(f"- informative true reward {level} (seeds {cell['seeds']}{missing}): flat KL there "
                     f"{_diff(cell['flat_kl_from_start'])}; step {_diff(cell['steps'], digits=2)}.")
    return lines + [""]


def _matched_lines(lr: str, table: dict) -> list[str]:
    """The flat prompts' KL from the start where each method first reaches each informative true
    reward level, GRPO minus our baseline, seed by seed."""
    if not table:
        return []
    lines = [f"## Matched progress, lr {lr}", "",
             "Both methods are still learning at the last step, and they learn the informative prompts at different "
             "speeds, so the flat prompts are also compared where each method first reaches the same informative true "
             f"reward (levels set before reading: {', '.join(f'{x:g}' for x in LEVELS)}), from the probe of every "
             "step: the flat KL from the start at that step of each run, GRPO minus our REINFORCE++-baseline, seed "
             "by seed.", ""]
    for level, cell in table.items():
        if not cell["seeds"]:
            lines.append(f"- informative true reward {level}: reached by both methods in no seed.")
            continue
        steps = {key: cell["steps"][key] for key in (GRPO, OURS)}
        missing = f"; not reached by both in seeds {cell['not_reached']}" if cell["not_reached"] else ""
        lines.append(
            f"- informative true reward {level} (seeds {cell['seeds']}{missing}): first reached at step "
            f"{mean(steps[GRPO]):.1f} by GRPO ({min(steps[GRPO])}-{max(steps[GRPO])}) and "
            f"{mean(steps[OURS]):.1f} by the baseline ({min(steps[OURS])}-{max(steps[OURS])}); flat KL there "
            f"{mean(cell['flat_kl_from_start'][GRPO]):.3f} against {mean(cell['flat_kl_from_start'][OURS]):.3f}; "
            f"GRPO minus baseline {_diff(cell['difference'])}; GRPO's further in {_count(cell['difference'], 1)}.")
    return lines + [""]


def _channel_lines(lr: str, cells: dict, explain: bool = True) -> list[str]:
    """Which channel moved the flat prompts: per method, the flat KL of the trained model and of
    each mixed model (``CHANNELS``), per seed, each channel's share and the channel rule's word;
    GRPO minus the baseline on each; with ``explain`` (AdamW's runs), the AdamW explanation kept or
    withdrawn by ``rows_explanation``."""
    if not cells:
        return []
    lines = [f"## Which channel moved the flat prompts, lr {lr}", "",
             "The probe also reads, every step, the flat prompts' KL from the start of two models mixed from the "
             "trained one and the start: the trained model with the flat prompts' own input-embedding rows reset "
             f"to the start (what {CHANNEL_OF['flat_kl_rows_reset']} moved), and the start model with only those "
             f"rows trained (what {CHANNEL_OF['flat_kl_shared_reset']} moved); the last {WINDOW} steps' mean, as "
             "for every endpoint. The two need not add up to the whole. The rule, fixed before any run with this "
             f"probe was read: a channel carries the movement (**yes**) when its model alone keeps at least "
             f"{CARRIES:.0%} of the trained model's flat KL in every seed, **no** when it keeps less in every "
             "seed, **mixed** otherwise.", ""]
    for key, cell in cells.items():
        if key == "grpo_minus_ours":
            continue
        full = cell["flat_kl_from_start"]
        lines.append(f"- {cell['label']} (seeds {cell['seeds']}): flat KL {mean(full):.3f} (per seed "
                     f"{', '.join(f'{x:.3f}' for x in full)}).")
        for name in CHANNELS:
            c = cell[name]
            lines.append(f"  - {CHANNEL_OF[name]} alone: {c['mean']:.3f} (per seed "
                         f"{', '.join(f'{x:.3f}' for x in c['per_seed'])}; share "
                         f"{', '.join(f'{x:.0%}' for x in c['share'])}): carries it: **{c['carries']}**.")
    if "grpo_minus_ours" in cells:
        lines += ["", "GRPO minus our REINFORCE++-baseline, paired by seed:"]
        lines += [f"- {CHANNEL_OF[name]} alone: {_diff(cells['grpo_minus_ours'][name])}." for name in CHANNELS]
    if not explain:
        return lines + [""]
    verdict = rows_explanation(cells)
    lines += ["", f"The AdamW explanation (GRPO's full-size flat advantages move the flat prompts' own rows no "
              "further than the baseline's, since AdamW sizes each parameter's step by its own gradient history) "
              "needs their own rows to carry the movement for both methods: by the rule it is "
              f"**{verdict}**" + (" (the explanation stands as a measured channel, not as a cause: what AdamW does "
                                  "to those rows was not isolated)." if verdict == "kept" else
                                  "; what moved the flat prompts is stated above, channel by channel."), ""]
    return lines


def _caveats(lr: str, v: dict, rows: dict) -> list[str]:
    """What the verdict does not carry, with the numbers that say so."""
    lines = [f"## What these runs do not show, lr {lr}", ""]
    rises = {key: rows[key]["informative_reward_rise"] for key in (GRPO, OURS)
             if "informative_reward_rise" in rows[key]}
    lines += [
        "- **One task, one start.** Every seed trains the same quality table (task seed 0) from the same start "
        "model; a seed changes the data order, the sampling streams and the noise only. The seeds measure how "
        "runs of this one task vary, not how tasks or models do.",
    ]
    if rises:
        lines.append("- **Nothing has converged at the last step.** The informative true reward still rose over the "
                     f"last {WINDOW} steps (mean [95% t-interval]): " + "; ".join(
                         f"{rows[key]['label']} {cell['mean']:+.3f}"
                         + (" [{:+.3f}, {:+.3f}]".format(*t_interval(cell["per_seed"])) if len(cell["per_seed"]) > 1
                            else "")
                         + f" (up in {sum(x > 0 for x in cell['per_seed'])} of {len(cell['per_seed'])} seeds)"
                         for key, cell in rises.items())
                     + ". The verdict is read at one horizon; the matched-progress comparison above reads the flat "
                       "prompts at equal progress instead.")
    lines += [
        f"- **Flat entropy drop and flat KL from the start are one measure here** ({TWIN_NOTE}); only the KL is an "
        "endpoint.",
        f"- **Few seeds.** {len(v['seeds'])} paired seeds; the tests above are exact for that count, and a sign "
        "count of every seed is the strongest evidence it can give.",
    ]
    if "control" in v:
        gap = max(abs(x) for x in v["control"]["flat_kl_from_start"]["per_seed"])
        lines.append(f"- **Two implementations of one method drift apart.** Ours and verl's REINFORCE++-baseline "
                     f"compute the same advantages, yet their flat KL differs by up to {gap:.3f} in a seed (control, "
                     "below): float differences grow over the run, which sets the scale below which a difference "
                     "between methods means little.")
    return lines + [""]


BANDIT = {  # docs/bandit.md's numbers, for the claim-by-claim table
    "setting": "tabular softmax: each prompt's logits its own, nothing shared; plain SGD; 256 prompts x 10 answers, "
               "100 steps; 5 seeds, means",
    "construction": "by construction (not measured there)",
    "clean": "by construction (advantage 0, gradient 0)",
    "baseline": "means of 5 seeds, no interval kept: flat entropy drop 0.26 at lr 100 (start 2.30), 0.003 at lr 30",
    "drift": "means of 5 seeds, no interval kept: entropy drop 0.71 (GRPO) and 0.26 (baseline) at lr 100, 0.06 and "
             "0.003 at lr 30",
    "slower": "means of 5 seeds, no interval kept: quality 1.072 (GRPO) and 1.325 (baseline) at lr 30, 1.452 and "
              "1.446 at lr 100 (of 1.528)",
}


def _bandit_table(lr: str, v: dict, rows: dict, clean_rows: dict, effect: dict, part: dict, best: float,
                  steps: int, spec: dict, optimizer: str = "AdamW") -> list[str]:
    """The bandit's claims against these runs, the verl column's words by the rule."""
    n = len(v["seeds"])
    words = v["answers"]
    flat, slow = v["flat_kl_from_start"], v["informative_true_reward"]
    lines = ["## The bandit and this model, claim by claim", "",
             f"| claim | the bandit ([docs/bandit.md](../../bandit.md)) | verl's trainer, this model ({n} seeds, "
             "paired; words by the rule above) |", "| --- | --- | --- |",
             f"| setting | {BANDIT['setting']} | {spec.get('parameters', '?'):,}-parameter Qwen2: each prompt its own "
             f"input row, shared layers and output layer; {optimizer}, lr {lr}; {len(spec['prompts'])} prompts x "
             f"{len(spec['answers'])} tokens, {steps} steps; {n} seeds, paired |",
             f"| GRPO presents the flat prompts' noise as full-size advantages | {BANDIT['construction']} | "
             f"**{words['noise_as_signal']}** (by construction): rms {rows[GRPO]['flat_adv_rms']['mean']:.3f} "
             f"against {rows[OURS]['flat_adv_rms']['mean']:.3f} ({v['flat_adv_rms']['ratio']:.2f}x) |"]
    if clean_rows:
        kls = [clean_rows[key]["flat_kl_from_start"]["mean"] for key in clean_rows]
        noisy_kls = [rows[key]["flat_kl_from_start"]["mean"] for key in rows]
        lines.append(f"| without noise the flat prompts stay where they start | {BANDIT['clean']} | flat KL, means "
                     f"per method: {min(kls):.2f}-{max(kls):.2f} noise-free; {min(noisy_kls):.2f}-"
                     f"{max(noisy_kls):.2f} with noise |")
    if OURS in effect:
        moved = effect[OURS]["flat_kl_from_start"]
        lines.append(f"| the noise barely moves the baseline's flat prompts | {BANDIT['baseline']} | flat KL, noisy "
                     f"minus noise-free, {_interval(moved, 2)}, higher with noise in {_count(moved, 1)} |")
    head = part.get("answers", {})
    noise_flat = (f"; the noise's part, **{head['flat_moved_more']}**: "
                  f"{_interval(part['flat_kl_from_start']['noise_part'], 2)}" if part else "")
    lines.append(f"| GRPO's flat prompts drift further than the baseline's | {BANDIT['drift']} | "
                 f"with noise at step {steps}, **{words['flat_moved_more']}**: GRPO minus baseline flat KL "
                 f"{_interval(flat, 2)}, GRPO's larger in {_count(flat, 1)}{noise_flat} |")
    noise_slow = (f"; the noise's part, **{head['informative_reward_lower_for_grpo']}**: "
                  f"{_interval(part['informative_true_reward']['noise_part'], 2)}, GRPO minus baseline without noise "
                  f"{_interval(part['informative_true_reward']['noise_free'], 2)}" if part else "")
    lines.append(f"| GRPO learns the informative prompts more slowly | {BANDIT['slower']} | with noise, "
                 f"**{words['informative_reward_lower_for_grpo']}**: GRPO minus baseline informative true reward "
                 f"{_interval(slow, 2)} (best {best:.2f}), GRPO's lower in {_count(slow, -1)}{noise_slow} |")
    return lines + ["", "[t-interval] after each difference: its mean and 95% t-interval over the paired seeds.", ""]


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
                 f"({_interval(part['informative_true_reward']['noise_part'], 2)}, primary sign-flip p "
                 f"{part['primary']['informative_true_reward']:.3f}); the noise moved GRPO's "
                 f"flat prompts further than the baseline's: {head['flat_moved_more']} "
                 f"({_interval(part['flat_kl_from_start']['noise_part'], 2)}, primary sign-flip p "
                 f"{part['primary']['flat_kl_from_start']:.3f}). Without noise GRPO's informative true reward was "
                 f"already {_interval(part['informative_true_reward']['noise_free'], 2)} from the baseline's")
    text += (f". With noise alone, GRPO minus the baseline: informative true reward "
             f"{_interval(v['informative_true_reward'], 2)} ({v['answers']['informative_reward_lower_for_grpo']}), "
             f"flat KL from the start {_interval(v['flat_kl_from_start'], 2)} ({v['answers']['flat_moved_more']}).")
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
        lines += ["## Verdict", ""] + _verdict_lines(lr, v, table[lr], clean.get(lr, {}), part.get(lr, {}), optimizer)
        lines += _noise_part_lines(lr, part.get(lr, {})) + _matched_noise_lines(lr, matched_part.get(lr, {}))
        lines += _matched_lines(lr, progress.get(lr, {}))
        lines += _channel_lines(lr, moved.get(lr, {}), explain=optimizer == "adamw")
        lines += _caveats(lr, v, table[lr])
        lines += _bandit_table(lr, v, table[lr], clean.get(lr, {}), effect.get(lr, {}), part.get(lr, {}), best, steps,
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
            lines.append(f"| {row['label']} | {len(row['seeds'])} | {_cell(row, 'informative_true_reward')} "
                         f"| {_cell(row, 'flat_entropy')} "
                         f"| {_cell(row, 'flat_entropy_drop')} | {_cell(row, 'flat_kl_from_start', 4)} "
                         f"| {_cell(row, 'informative_kl_from_start', 4)} | {_cell(row, 'flat_informative_tv')} "
                         f"| {_cell(row, 'flat_adv_rms')} | {_cell(row, 'informative_adv_rms')} "
                         f"| {_cell(row, 'noise_std_sampled')} | {row['seconds']:.0f} |")
        v = verdict.get(lr)
        if v:
            lines += ["", f"GRPO minus our REINFORCE++-baseline, paired by seed (seeds {v['seeds']}):"]
            lines += [f"- {LABELS[name]}: {_diff(v[name], tests=name not in BY_CONSTRUCTION)}"
                      + (f"; GRPO's is {v[name]['ratio']:.2f}x the baseline's." if name in BY_CONSTRUCTION else ".")
                      for name in PAIRED_MEASURES]
            if "control" in v:
                lines += ["", "Control, ours minus verl's REINFORCE++-baseline, paired by seed (seeds "
                          f"{v['control']['flat_kl_from_start']['seeds']}; the same method, two implementations):"]
                lines += [f"- {LABELS[name]}: {_diff(v['control'][name])}" for name in NOISE_MEASURES]
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
                lines.append(f"| {row['label']} | {len(row['seeds'])} | {_cell(row, 'informative_true_reward')} | "
                             f"{_cell(row, 'flat_entropy')} | {_cell(row, 'flat_kl_from_start', 4)} | "
                             f"{_cell(row, 'flat_informative_tv')} | {_cell(row, 'flat_adv_rms')} |")
            lines += ["", "Informative true reward at the end, per seed (noise 0): " + "; ".join(
                f"{row['label']} {', '.join(f'{x:.3f}' for x in row['informative_true_reward']['per_seed'])}"
                for row in rows.values()) + ".", ""]
            for key, cell in effect.get(lr, {}).items():
                lines.append(f"{rows[key]['label']}, noisy minus noise-free (seeds {cell['seeds']}):")
                lines += [f"- {LABELS[name]}: {_diff(cell[name])}" for name in NOISE_MEASURES] + [""]
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
    """results.json, one plot per lr and noise level and report.md (``notes`` appended), named by
    ``output_name``."""
    out.mkdir(parents=True, exist_ok=True)
    design = spec["design"]
    start = initial(spec)
    optimizer = optimizer_of(records[0])
    (out / output_name(design, "results.json", optimizer, armed(records))).write_text(
        json.dumps(results(records, spec, control), indent=1))
    noisy_plots(out, [*records, *control], start, best_quality(spec), prompt_blind_quality(spec), design)
    text = noisy_report_text(records, spec, control, written_by)
    (out / output_name(design, "report.md", optimizer, armed(records))).write_text(
        text + (("\n" + notes.strip() + "\n") if notes else ""))
