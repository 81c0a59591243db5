"""What the noisy task's runs show, as numbers and the verdict's words: the summary over seeds,
GRPO against our REINFORCE++-baseline seed by seed (``stats.paired``), each claim's word by the
rule fixed when only seed 0 had run (``answer``), the part of a difference the noise caused, and
the flat prompts' movement at matched progress."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from verl_rfpp.experiments.noisy import task as noisy_task
from verl_rfpp.experiments.series import mean, series, std
from verl_rfpp.experiments.stats import paired

WINDOW = 5  # steps averaged at the end of a run
P = noisy_task.PREFIX
# Informative true reward the noise-free baseline must reach in every seed, by optimizer: the level its
# rate was chosen for (AdamW: issue 32; SGD: docs/curves/noisy/report.md, stated with sgd_lr before any
# SGD run, since no SGD rate of the replay reached 1.6 with the flat prompts kept still).
LEARNED = {"adamw": 1.6, "sgd": 1.0}
LEVELS = (0.5, 1.0, 1.5)  # informative true reward levels of the matched-progress comparison, set before reading
GRPO, OURS, VERL = "verl_grpo", "ours_baseline", "verl_baseline"


@dataclass(frozen=True)
class Claim:
    """One claim the verdict answers: its pre-set endpoint ``measure`` (GRPO minus our baseline, a
    paired difference), the ``sign`` it claims, the measure's derived ``twin`` (shown beside, not
    judged) and, for a claim true by construction, why (its word is shown, no test)."""

    key: str
    measure: str
    sign: int
    text: str
    twin: Optional[str] = None
    construction: Optional[str] = None
    contrary: str = ""  # what the runs say when they contradict it (the plain answer names it)
    noise_text: str = ""  # the claim about the noise's part (noisy minus noise-free, paired): the headline


CLAIMS = (
    Claim("noise_as_signal", "flat_adv_rms", 1, "GRPO's flat advantages are larger (noise presented as signal)",
          construction="GRPO divides each group of 16 by its own std (ddof 1), so its flat advantages have rms "
                       "sqrt(15/16) = 0.968 whatever the noise's size, and the baselines' scale with the noise: "
                       "a check that the runs are what they claim, with no test"),
    Claim("flat_moved_more", "flat_kl_from_start", 1, "GRPO's flat prompts moved further from their start",
          twin="flat_entropy_drop", contrary="flat prompts moved less under GRPO",
          noise_text="the noise moved GRPO's flat prompts further from their start than the baseline's"),
    Claim("informative_reward_lower_for_grpo", "informative_true_reward", -1,
          "GRPO learned the informative prompts more slowly (lower informative true reward at the end)",
          contrary="GRPO learned the informative prompts faster",
          noise_text="the noise slowed GRPO's learning of the informative prompts more than the baseline's"),
)
CONSEQUENCES = ("flat_moved_more", "informative_reward_lower_for_grpo")  # the plain answer's two parts
CLAIM = {claim.key: claim for claim in CLAIMS}
# The two primary tests per arm, named before the own-rate SGD runs (issue 52): the two-sided exact sign-flip
# p of the noise's part (GRPO minus our baseline, noisy minus noise-free, paired) of each consequence's
# endpoint at the end. Every other p in the reports is exploratory.
PRIMARY = tuple(CLAIM[key].measure for key in CONSEQUENCES)
RULE_COMMIT = "db27e9c"  # the commit that added "against" and the headline on the noise's part
# "against": the opposite sign in at least this share of the seeds (7 of 8), and the t-interval excluding 0 on
# that side; fixed before the own-rate SGD runs (issue 52)
AGAINST = Fraction(7, 8)
TWIN_NOTE = ("the flat prompts start near uniform (The task, below), and for a uniform start "
             "KL(pi || pi_start) = ln |V| - H(pi), so the entropy drop and the KL from the start measure the same "
             "movement here")


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


def arm_of(record: dict) -> str:
    """The key a run is grouped and paired under: ``str(lr)``, or its ``arm`` where the methods
    compared ran at different rates (the own-rate SGD arm, ``noisy.plan.arm``)."""
    return record.get("arm") or str(record["lr"])


def group(records: list[dict]) -> dict[str, dict[str, list[dict]]]:
    """``{arm (str(lr)): {method key: [records by seed]}}``."""
    grouped: dict[str, dict[str, list[dict]]] = {}
    for record in sorted(records, key=lambda r: r["seed"]):
        grouped.setdefault(arm_of(record), {}).setdefault(record["method"]["key"], []).append(record)
    return grouped


def group_noise(records: list[dict]) -> dict[tuple[str, float], dict[str, list[dict]]]:
    """``{(arm (str(lr)), noise_std): {method key: [records by seed]}}``."""
    grouped: dict[tuple[str, float], dict[str, list[dict]]] = {}
    for record in sorted(records, key=lambda r: r["seed"]):
        by_method = grouped.setdefault((arm_of(record), record["noise_std"]), {})
        by_method.setdefault(record["method"]["key"], []).append(record)
    return grouped


def summarize_noisy(records: list[dict], start: dict[str, float]) -> dict[str, dict[str, dict]]:
    """Per lr and method, over seeds (mean, sample std, the per-seed values), at the end of the runs
    (mean of the last WINDOW steps): informative true reward, flat entropy and its drop from the
    start, KL from the start, the flat-informative total variation gap, and the informative true
    reward's rise over those steps (last minus WINDOW steps before); over all steps: the
    advantages' rms on flat and informative rows and the sampled noise std."""
    table: dict[str, dict[str, dict]] = {}
    for lr, methods in group(records).items():
        table[lr] = {}
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
            rewards = [series(r, P + "informative_true_reward") for r in runs]
            if all(len(s) > WINDOW for s in rewards):
                ends["informative_reward_rise"] = [s[-1] - s[-1 - WINDOW] for s in rewards]
            if all(series(r, P + "flat_informative_tv") for r in runs):  # runs before the gap was probed lack it
                ends["flat_informative_tv"] = [mean(series(r, P + "flat_informative_tv")[-WINDOW:]) for r in runs]
            for name in CHANNELS:  # runs before the channel probe lack it
                if all(series(r, P + name) for r in runs):
                    ends[name] = [mean(series(r, P + name)[-WINDOW:]) for r in runs]
            for name, values in ends.items():
                row[name] = {"mean": mean(values), "std": std(values), "per_seed": values}
            table[lr][key] = row
    return table


CHANNELS = ("flat_kl_rows_reset", "flat_kl_shared_reset")  # the probe's two mixed models (noisy_task.channel_metrics)
CHANNEL_OF = {"flat_kl_rows_reset": "the shared layers and the output layer",  # what each mixed model keeps trained
              "flat_kl_shared_reset": "the flat prompts' own input rows"}
CARRIES = 0.5  # a channel carries the flat prompts' movement in a seed when its model alone keeps at least this
#                share of the trained model's flat KL; set before any run with the channel probe was read
NOISE_MEASURES = ("flat_entropy_drop", "flat_kl_from_start", "informative_true_reward")  # the policy's own
PAIRED_MEASURES = (*NOISE_MEASURES, "flat_adv_rms", "informative_adv_rms")


def pair(a: dict, b: dict, name: str) -> dict:
    """``a`` minus ``b`` on measure ``name``, seed by seed over the seeds both ran (``stats.paired``),
    and the ratio of their means."""
    both = sorted(set(a["seeds"]) & set(b["seeds"]))
    left = [a[name]["per_seed"][a["seeds"].index(s)] for s in both]
    right = [b[name]["per_seed"][b["seeds"].index(s)] for s in both]
    return {"seeds": both, **paired(left, right), "ratio": mean(left) / mean(right) if mean(right) else float("inf")}


def answer(d: dict, sign: int) -> str:
    """The verdict's rule on one paired difference ``d`` (fixed when only seed 0 had run; ``against``
    added before the own-rate SGD runs, issue 52): ``yes`` when ``sign`` times it is positive in every
    seed, ``no`` when negative in every seed, ``against`` when negative in at least ``AGAINST`` of the
    seeds and its 95% t-interval lies wholly on the negative side, ``mixed`` otherwise
    (docs/curves/noisy/report.md, Verdict)."""
    per_seed = d["per_seed"]
    if per_seed and all(sign * x > 0 for x in per_seed):
        return "yes"
    if per_seed and all(sign * x < 0 for x in per_seed):
        return "no"
    interval = d.get("t_95") or []
    if (per_seed and sum(sign * x < 0 for x in per_seed) >= AGAINST * len(per_seed) and interval
            and max(sign * x for x in interval) < 0):
        return "against"
    return "mixed"


def plain(answers: dict[str, str]) -> str:
    """The plain answer from the two consequences' words: ``contradicted: ...`` naming each
    consequence the runs contradict (its word ``no`` or ``against``), else yes when both hold,
    partly when one does, ``not shown`` when neither does."""
    contrary = [CLAIM[key].contrary for key in CONSEQUENCES if answers[key] in ("no", "against")]
    if contrary:
        return "contradicted: " + "; ".join(contrary)
    words = [answers[key] for key in CONSEQUENCES]
    return "yes" if all(w == "yes" for w in words) else "partly" if "yes" in words else "not shown"


def verdicts(table: dict[str, dict[str, dict]]) -> dict:
    """Per lr, GRPO against our REINFORCE++-baseline, seed by seed (same seeds: data order, start,
    sampling and noise streams): GRPO minus baseline on every ``PAIRED_MEASURES`` (``pair``), each
    claim's word (``answers``, by ``answer`` on its endpoint) and the ``plain`` answer. And the
    control: ours minus verl's REINFORCE++-baseline."""
    out = {}
    for lr, rows in table.items():
        if GRPO not in rows or OURS not in rows:
            continue
        grpo, ours = rows[GRPO], rows[OURS]
        verdict: dict = {"seeds": sorted(set(grpo["seeds"]) & set(ours["seeds"]))}
        verdict.update({name: pair(grpo, ours, name) for name in PAIRED_MEASURES})
        verdict["answers"] = {claim.key: answer(verdict[claim.measure], claim.sign) for claim in CLAIMS}
        verdict["plain"] = plain(verdict["answers"])
        if VERL in rows:
            verdict["control"] = {name: pair(ours, rows[VERL], name) for name in PAIRED_MEASURES}
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
                    **{name: pair(noisy_row, clean, name) for name in NOISE_MEASURES}}
    return out


def _at(row: dict, name: str, seed: int) -> float:
    """A summary row's ``name`` in ``seed``."""
    return row[name]["per_seed"][row["seeds"].index(seed)]


def noise_part(table: dict[str, dict[str, dict]], control: dict[str, dict[str, dict]]) -> dict:
    """Per lr and consequence endpoint (``PRIMARY``), over the seeds GRPO and our baseline ran
    both ways: GRPO minus the baseline noise-free (``noise_free``), with noise (``noisy``), and the
    part the noise caused (``noise_part``: noisy minus noise-free, paired, i.e. the noise's effect
    on GRPO minus its effect on the baseline); ``share``: that part's mean over the noisy
    difference's. The headline (issue 52): each consequence's word by ``answer`` on its noise's
    part (``answers``), the ``plain`` answer from them, and the ``primary`` tests' p (the noise's
    part's two-sided sign-flip p, per endpoint)."""
    out: dict = {}
    for lr, clean in control.items():
        rows = table.get(lr, {})
        if not all(key in rows and key in clean for key in (GRPO, OURS)):
            continue
        seeds = sorted(set.intersection(*(set(r[k]["seeds"]) for r in (rows, clean) for k in (GRPO, OURS))))
        out[lr] = {"seeds": seeds}
        for name in PRIMARY:
            noisy_diff = [_at(rows[GRPO], name, s) - _at(rows[OURS], name, s) for s in seeds]
            clean_diff = [_at(clean[GRPO], name, s) - _at(clean[OURS], name, s) for s in seeds]
            part = paired(noisy_diff, clean_diff)
            out[lr][name] = {"noisy": paired(noisy_diff, [0.0] * len(seeds)),
                             "noise_free": paired(clean_diff, [0.0] * len(seeds)), "noise_part": part,
                             "share": part["diff_mean"] / mean(noisy_diff) if mean(noisy_diff) else float("nan")}
        out[lr]["answers"] = {key: answer(out[lr][CLAIM[key].measure]["noise_part"], CLAIM[key].sign)
                              for key in CONSEQUENCES}
        out[lr]["plain"] = plain(out[lr]["answers"])
        out[lr]["primary"] = {name: out[lr][name]["noise_part"]["sign_flip_p"] for name in PRIMARY}
    return out


def first_reaching(record: dict, level: float) -> Optional[int]:
    """The first step whose probed informative true reward is at least ``level``, or None."""
    for step, value in sorted(record["metrics"].get(P + "informative_true_reward", [])):
        if value >= level:
            return step
    return None


def at_step(record: dict, tag: str, step: int) -> float:
    """The run's value of ``tag`` at ``step``."""
    return dict(record["metrics"][tag])[step]


def matched(records: list[dict], levels: tuple[float, ...] = LEVELS) -> dict:
    """Per lr and level, GRPO against our baseline where each first reaches that informative true
    reward (``first_reaching``), seed by seed: the steps, each method's flat KL from the start
    there, and GRPO minus the baseline (paired, over the seeds where both reached it;
    ``not_reached``: the others)."""
    out: dict = {}
    for lr, methods in group(records).items():
        if GRPO not in methods or OURS not in methods:
            continue
        by_seed = {key: {r["seed"]: r for r in methods[key]} for key in (GRPO, OURS)}
        seeds = sorted(set(by_seed[GRPO]) & set(by_seed[OURS]))
        out[lr] = {}
        for level in levels:
            steps = {key: {s: first_reaching(by_seed[key][s], level) for s in seeds} for key in (GRPO, OURS)}
            both = [s for s in seeds if steps[GRPO][s] is not None and steps[OURS][s] is not None]
            kl = {key: [at_step(by_seed[key][s], P + "flat_kl_from_start", steps[key][s]) for s in both]
                  for key in (GRPO, OURS)}
            out[lr][f"{level:g}"] = {
                "seeds": both, "not_reached": [s for s in seeds if s not in both],
                "steps": {key: [steps[key][s] for s in both] for key in (GRPO, OURS)},
                "flat_kl_from_start": kl, "difference": paired(kl[GRPO], kl[OURS])}
    return out


def matched_noise_part(records: list[dict], control: list[dict], levels: tuple[float, ...] = LEVELS) -> dict:
    """Per lr and level, the noise's part at matched informative progress, over the seeds where
    GRPO and our baseline reached the level both with noise and without: for the flat KL from the
    start where each run first reaches the level (``flat_kl_from_start``, claimed sign +) and for
    the step at which it first does (``steps``, claimed sign +: the noise slows GRPO more), GRPO
    minus the baseline with noise minus the same without, paired (``stats.paired``);
    ``not_reached``: the other seeds."""
    out: dict = {}
    noisy, clean = group(records), group(control)
    for lr, methods in noisy.items():
        runs = {(key, kind): {r["seed"]: r for r in table.get(lr, {}).get(key, [])}
                for key in (GRPO, OURS) for kind, table in (("noisy", noisy), ("clean", clean))}
        seeds = sorted(set.intersection(*(set(by_seed) for by_seed in runs.values())))
        if not seeds:
            continue
        out[lr] = {}
        for level in levels:
            steps = {cell: {s: first_reaching(by_seed[s], level) for s in seeds} for cell, by_seed in runs.items()}
            both = [s for s in seeds if all(steps[cell][s] is not None for cell in runs)]
            values = {"flat_kl_from_start": {cell: [at_step(runs[cell][s], P + "flat_kl_from_start", steps[cell][s])
                                                    for s in both] for cell in runs},
                      "steps": {cell: [float(steps[cell][s]) for s in both] for cell in runs}}
            cell_out: dict = {"seeds": both, "not_reached": [s for s in seeds if s not in both]}
            for name, by_cell in values.items():
                diff = {kind: [g - o for g, o in zip(by_cell[(GRPO, kind)], by_cell[(OURS, kind)], strict=True)]
                        for kind in ("noisy", "clean")}
                cell_out[name] = paired(diff["noisy"], diff["clean"])
            out[lr][f"{level:g}"] = cell_out
    return out


def carried(shares: list[float]) -> str:
    """The channel rule on the per-seed shares of one channel (``CARRIES``): ``yes`` when at least
    ``CARRIES`` in every seed, ``no`` when below it in every seed, ``mixed`` otherwise."""
    if shares and all(x >= CARRIES for x in shares):
        return "yes"
    if shares and all(x < CARRIES for x in shares):
        return "no"
    return "mixed"


def channels(table: dict[str, dict[str, dict]]) -> dict:
    """Per lr and method whose runs all carry the channel probe (the last ``WINDOW`` steps, as the
    endpoint): for each channel of ``CHANNELS``, the flat KL its mixed model keeps, per seed, its
    share of the trained model's flat KL and the rule's word (``carried``); and GRPO minus our
    baseline on each (paired) where both have it."""
    out: dict = {}
    for lr, rows in table.items():
        cells: dict = {}
        for key, row in rows.items():
            if not all(name in row for name in CHANNELS):
                continue
            full = row["flat_kl_from_start"]["per_seed"]
            cells[key] = {"label": row["label"], "seeds": row["seeds"], "flat_kl_from_start": full}
            for name in CHANNELS:
                kept = row[name]["per_seed"]
                shares = [k / f if f > 0 else float("nan") for k, f in zip(kept, full, strict=True)]
                cells[key][name] = {"per_seed": kept, "mean": row[name]["mean"], "share": shares,
                                    "carries": carried(shares)}
        if GRPO in cells and OURS in cells:
            cells["grpo_minus_ours"] = {name: pair(rows[GRPO], rows[OURS], name) for name in CHANNELS}
        if cells:
            out[lr] = cells
    return out


def rows_explanation(cells: dict) -> str:
    """The AdamW explanation of the report (GRPO's full-size flat advantages move the flat
    prompts' own rows no further than the baseline's, since AdamW scales each parameter's step by
    its own gradient history) rests on the flat prompts having moved through their own rows:
    ``kept`` when that channel carries the movement (``carried``: yes) for GRPO and for our
    baseline, ``withdrawn`` otherwise. Fixed before any run with the channel probe was read."""
    rows = "flat_kl_shared_reset"
    return "kept" if all(cells.get(key, {}).get(rows, {}).get("carries") == "yes" for key in (GRPO, OURS)) \
        else "withdrawn"
