"""The generated sections of the noisy task's report.md, sentence by sentence: each difference with
its interval (``diff_text``, ``interval_text``), the rule's paragraph, the verdict, the noise's part,
matched progress, the channels, the caveats and the claim-by-claim table against the bandit. Every
word is ``noisy.analysis``'s rule applied to the runs; ``noisy.report`` assembles them."""

from __future__ import annotations

import math

from verl_rfpp.experiments.noisy import task as noisy_task
from verl_rfpp.experiments.noisy.analysis import (
    AGAINST,
    CARRIES,
    CHANNEL_OF,
    CHANNELS,
    CLAIMS,
    GRPO,
    LEARNED,
    LEVELS,
    OURS,
    PRIMARY,
    RULE_COMMIT,
    TWIN_NOTE,
    WINDOW,
    rows_explanation,
)
from verl_rfpp.experiments.series import mean
from verl_rfpp.experiments.stats import bootstrap_interval, t_interval

BY_CONSTRUCTION = ("flat_adv_rms", "informative_adv_rms")  # GRPO's rms is sqrt(15/16) on every group: no test
LABELS = {"flat_entropy_drop": "flat entropy drop (nats)", "flat_kl_from_start": "flat KL from start",
          "informative_true_reward": "informative true reward", "flat_adv_rms": "flat advantage rms",
          "informative_adv_rms": "informative advantage rms"}


def cell_text(row: dict, name: str, digits: int = 3) -> str:
    if name not in row:
        return "not probed"
    return f"{row[name]['mean']:.{digits}f} ± {row[name]['std']:.{digits}f}"


def diff_text(d: dict, digits: int = 3, tests: bool = True) -> str:
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


def count_text(d: dict, sign: int) -> str:
    """How many seeds have ``sign``: "4 of 5 seeds"."""
    return f"{d['positive'] if sign > 0 else d['negative']} of {len(d['per_seed'])} seeds"


def smallest_p(n: int) -> float:
    """The smallest two-sided p of the exact sign and sign-flip tests over ``n`` nonzero differences."""
    return min(1.0, 2 / 2 ** n)


def interval_text(d: dict, digits: int = 3) -> str:
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


def learned_lines(clean_rows: dict, optimizer: str) -> list[str]:
    """Whether the noise-free baseline learned, against every optimizer's learned level."""
    if OURS not in clean_rows:
        return []
    reached = clean_rows[OURS]["informative_true_reward"]["per_seed"]
    levels = "; ".join(f"at least {level:g}, the level {noisy_task.OPTIMIZER_LABEL[name]}'s rate was chosen for"
                       f"{' (this report)' if name == optimizer else ''}: "
                       f"**{'yes' if min(reached) >= level else 'no'}**" for name, level in LEARNED.items())
    return [f"- Noise-free, our REINFORCE++-baseline learned the informative prompts (true reward in every seed) "
            f"{levels} (per seed {', '.join(f'{x:.3f}' for x in reached)})."]


def verdict_lines(lr: str, v: dict, rows: dict, clean_rows: dict, part: dict, optimizer: str) -> list[str]:
    """The plain answer at ``lr`` and each claim: with noise-free runs (``part``), the headline on the
    noise's part of each consequence (``noise_part``'s words and primary p), then GRPO minus the
    baseline with noise alone (exploratory); without them, the latter's words are the verdict."""
    words = v["answers"]
    construction = CLAIMS[0]
    d = v[construction.measure]
    grpo, ours = rows[GRPO][construction.measure]["mean"], rows[OURS][construction.measure]["mean"]
    signal = (f"- {construction.text}; endpoint {LABELS[construction.measure]}: **{words[construction.key]}**. GRPO "
              f"{grpo:.3f}, baseline {ours:.3f} ({d['ratio']:.2f}x); GRPO's larger in "
              f"{count_text(d, construction.sign)}. "
              f"By construction: {construction.construction}.")

    def noisy_claims() -> list[str]:
        lines = []
        for claim in CLAIMS[1:]:
            d = v[claim.measure]
            line = (f"- {claim.text}; endpoint {LABELS[claim.measure]}: **{words[claim.key]}**. GRPO "
                    f"{rows[GRPO][claim.measure]['mean']:.3f}, baseline {rows[OURS][claim.measure]['mean']:.3f}; "
                    f"GRPO minus baseline {diff_text(d)}.")
            if claim.twin:
                line += (f" {LABELS[claim.twin].capitalize()}, a derived twin of the endpoint ({TWIN_NOTE}), shown "
                         f"beside it and not judged: {diff_text(v[claim.twin])}.")
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
                         f"{diff_text(cell)}; primary: sign-flip p = {part['primary'][claim.measure]:.3f}.")
        lines += learned_lines(clean_rows, optimizer)
        lines += ["", "With noise alone, GRPO minus the baseline (what a user of noisy rewards sees; it does not "
                  "separate what the noise did from what the methods do without it; words by the same rule, p "
                  "exploratory):", ""] + noisy_claims()
    else:
        lines = [question + f"{v['plain'][0].upper() + v['plain'][1:]}**: flat prompts moved further: "
                 f"{words['flat_moved_more']}; informative ones learned more slowly: "
                 f"{words['informative_reward_lower_for_grpo']}. No noise-free runs: the noise's part cannot be "
                 f"separated; GRPO against our REINFORCE++-baseline with noise, paired over seeds {v['seeds']}; "
                 "one pre-set endpoint per claim:", "", signal] + noisy_claims() + learned_lines(clean_rows, optimizer)
    return lines + ["", rule_text(len(v["seeds"]), bootstrap_ratios(part) if part else {}), ""]


def noise_part_lines(lr: str, part: dict) -> list[str]:
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
                  f"  - noise-free: {diff_text(cell['noise_free'])};",
                  f"  - with noise: {diff_text(cell['noisy'])};",
                  f"  - the noise's part: {diff_text(cell['noise_part'])}."]
    return lines + [""]


def matched_noise_lines(lr: str, table: dict) -> list[str]:
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
                     f"{diff_text(cell['flat_kl_from_start'])}; step {diff_text(cell['steps'], digits=2)}.")
    return lines + [""]


def matched_lines(lr: str, table: dict) -> list[str]:
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
            f"GRPO minus baseline {diff_text(cell['difference'])}; GRPO's further in "
            f"{count_text(cell['difference'], 1)}.")
    return lines + [""]


def channel_lines(lr: str, cells: dict, explain: bool = True) -> list[str]:
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
        lines += [f"- {CHANNEL_OF[name]} alone: {diff_text(cells['grpo_minus_ours'][name])}." for name in CHANNELS]
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


def caveat_lines(lr: str, v: dict, rows: dict) -> list[str]:
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


def bandit_table(lr: str, v: dict, rows: dict, clean_rows: dict, effect: dict, part: dict, best: float,
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
                     f"minus noise-free, {interval_text(moved, 2)}, higher with noise in {count_text(moved, 1)} |")
    head = part.get("answers", {})
    noise_flat = (f"; the noise's part, **{head['flat_moved_more']}**: "
                  f"{interval_text(part['flat_kl_from_start']['noise_part'], 2)}" if part else "")
    lines.append(f"| GRPO's flat prompts drift further than the baseline's | {BANDIT['drift']} | "
                 f"with noise at step {steps}, **{words['flat_moved_more']}**: GRPO minus baseline flat KL "
                 f"{interval_text(flat, 2)}, GRPO's larger in {count_text(flat, 1)}{noise_flat} |")
    noise_slow = (f"; the noise's part, **{head['informative_reward_lower_for_grpo']}**: "
                  f"{interval_text(part['informative_true_reward']['noise_part'], 2)}, "
                  "GRPO minus baseline without noise "
                  f"{interval_text(part['informative_true_reward']['noise_free'], 2)}" if part else "")
    lines.append(f"| GRPO learns the informative prompts more slowly | {BANDIT['slower']} | with noise, "
                 f"**{words['informative_reward_lower_for_grpo']}**: GRPO minus baseline informative true reward "
                 f"{interval_text(slow, 2)} (best {best:.2f}), GRPO's lower in {count_text(slow, -1)}{noise_slow} |")
    return lines + ["", "[t-interval] after each difference: its mean and 95% t-interval over the paired seeds.", ""]
