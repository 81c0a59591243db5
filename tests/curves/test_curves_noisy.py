"""``verl-rfpp curves --task noisy``: the task's tokenizer, data and reward, the probe's metrics on
known answers, the report's numbers (a 1-step ``--quick`` run in verl's real trainer:
tests/e2e/test_curves_noisy_run.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from verl_rfpp.cli import main as cli
from verl_rfpp.experiments import stats
from verl_rfpp.experiments.noisy import analysis as noisy_analysis
from verl_rfpp.experiments.noisy import report as noisy_report
from verl_rfpp.experiments.noisy import reward as noisy_reward
from verl_rfpp.experiments.noisy import runs as noisy_runs
from verl_rfpp.experiments.noisy import task as noisy_task
from verl_rfpp.experiments.runs import METHODS

P = noisy_task.PREFIX


@pytest.fixture(scope="module", params=sorted(noisy_task.DESIGNS))
def built(request, tmp_path_factory):
    design = noisy_task.DESIGNS[request.param]
    return design, noisy_task.build_assets(tmp_path_factory.mktemp("noisy") / request.param, design)


def test_prompts_tokenize_as_verl_will_and_every_token_is_an_answer(built):
    from transformers import AutoConfig, AutoTokenizer

    design, spec = built
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])  # what verl loads (a Qwen2 tokenizer)
    assert spec["design"] == design.key and len(spec["prompts"]) == 16
    for row in spec["prompts"]:
        text = tokenizer.apply_chat_template([{"role": "user", "content": row["text"]}], add_generation_prompt=True,
                                             tokenize=False)
        assert tokenizer.encode(text, add_special_tokens=False) == row["ids"]
        if design.one_token:  # the prompt's own token, last: the answer is read at its embedding
            assert tokenizer.convert_ids_to_tokens(row["ids"]) == ["<|im_start|>", row["text"]]
        else:  # two tokens shared with other prompts, read through attention
            assert tokenizer.convert_ids_to_tokens(row["ids"]) == ["<|im_start|>", *row["text"], "<|im_end|>",
                                                                    "<|im_start|>"]
        assert len(row["quality"]) == len(tokenizer) == len(row["start"])
        assert math.isclose(sum(row["start"]), 1.0, rel_tol=1e-9)
        if row["kind"] == "flat":
            assert set(row["quality"]) == {0.0}
    assert len({tuple(row["ids"]) for row in spec["prompts"]}) == 16
    table = noisy_task.qualities(design)
    for token in range(len(tokenizer)):
        answer = noisy_task.answer_of(tokenizer.decode([token], skip_special_tokens=True))
        for row in spec["prompts"]:
            assert row["quality"][token] == table[row["text"]][answer]  # reward and probe agree per token
    assert tokenizer.encode("\n", add_special_tokens=False) == [3]  # verl's Qwen chat builder needs it
    assert AutoConfig.from_pretrained(spec["model"]).tie_word_embeddings is design.tied_embeddings


def test_the_shared_design_is_the_first_version_of_the_task(built):
    """The first report's task, token for token: specials, newline, ``i``, ``f``, digits, A-J."""
    design, spec = built
    if design is not noisy_task.SHARED:
        pytest.skip("the shared design's vocabulary")
    assert spec["prompts"][0]["ids"] == [1, 4, 6, 2, 1] and spec["prompts"][15]["ids"] == [1, 5, 13, 2, 1]
    assert spec["parameters"] == 19488


def test_data_blocks_are_half_informative_and_fixed_by_the_seed(tmp_path):
    import pandas as pd

    for design in noisy_task.DESIGNS.values():
        first, again, other = (pd.read_parquet(noisy_task.build_data(
            tmp_path / design.key / name, design, seed=seed, steps=6, noise_std=0.1)["train"])
            for name, seed in (("a", 1), ("b", 1), ("c", 2)))
        texts = lambda frame: [p[0]["content"] for p in frame["prompt"]]  # noqa: E731
        size = design.prompts_per_step
        assert len(first) == 6 * size and texts(first) == texts(again) and texts(first) != texts(other)
        for block in range(6):
            kinds = [info["kind"] for info in first["extra_info"][size * block: size * (block + 1)]]
            assert sorted(kinds) == ["flat"] * (size // 2) + ["informative"] * (size // 2)
        assert sorted(first["extra_info"].map(lambda info: info["index"])) == list(range(6 * size))  # row identity
    with pytest.raises(noisy_task.NoisyTaskError, match="prompts_per_step 3 must be even"):
        noisy_task.Design("odd", (("a", "b"), ("s", "t")), False, 3, 4, 1e-2, (), ())
    with pytest.raises(noisy_task.NoisyTaskError, match="at most twice 2"):
        noisy_task.Design("big", (("a", "b"), ("s", "t")), False, 6, 4, 1e-2, (), ())


def test_reward_is_true_quality_plus_noise_drawn_per_session_whatever_the_order():
    from verl_rfpp.cpu.patches import SESSION_KEY

    truth = json.dumps({"quality": {"A": 0.7, "": -1.0}, "noise_std": 0.1, "seed": 5})
    sessions = [f"train-3-{index}-{sample}-0" for index in range(2_000) for sample in range(10)]
    score = lambda session, answer="A", t=truth: noisy_reward.noisy_score(  # noqa: E731
        "x", answer, t, extra_info={"index": 1, SESSION_KEY: session})
    draws = torch.tensor([score(s) for s in sessions], dtype=torch.float64)
    assert abs(float(draws.mean()) - 0.7) < 0.003 and abs(float(draws.std()) - 0.1) < 0.003
    shuffled = list(range(0, len(sessions), 7))[::-1]  # another order, fewer calls: the same draw per session
    assert [score(sessions[i]) for i in shuffled] == [float(draws[i]) for i in shuffled]
    other_seed = json.dumps({"quality": {"A": 0.7}, "noise_std": 0.1, "seed": 6})
    assert sum(score(s, t=other_seed) != float(d) for s, d in zip(sessions[:100], draws[:100], strict=True)) == 100
    assert score("s", "", json.dumps({"quality": {"": -1.0}, "noise_std": 0.0, "seed": 0})) == -1.0
    with pytest.raises(noisy_task.NoisyTaskError, match="'B'"):
        score("s", "B")
    with pytest.raises(noisy_task.NoisyTaskError, match=SESSION_KEY):
        noisy_reward.noisy_score("x", "A", truth, extra_info={"index": 1})


def test_verl_loads_the_reward_function_by_the_path_the_runs_give_it(tmp_path):
    """verl executes the file at ``reward.custom_reward_function.path`` without registering it in
    ``sys.modules`` (so, for one, a dataclass there fails to build): the path ``overrides`` gives,
    loaded as verl loads it, scores like ``noisy.reward.noisy_score``."""
    from verl.utils.import_utils import load_extern_object

    from verl_rfpp.cpu.patches import SESSION_KEY

    given = noisy_runs.overrides({"train": "t", "test": "v"}, {"model": "m"}, 0.01, noisy_task.SEPARATE)
    path = next(o.split("=", 1)[1] for o in given if o.startswith("reward.custom_reward_function.path="))
    noisy_score = load_extern_object(module_path=path, object_name="noisy_score")
    truth = json.dumps({"quality": {"A": 0.7}, "noise_std": 0.1, "seed": 5})
    info = {"index": 1, SESSION_KEY: "train-1-1-0-0"}
    expected = noisy_reward.noisy_score("x", "A", truth, extra_info=info)
    assert noisy_score("x", "A", truth, extra_info=info) == expected


def test_the_cpu_backend_hands_each_session_its_identity_in_a_copy_of_extra_info():
    import asyncio

    from verl_rfpp.cpu import patches

    seen = []

    async def original(self, sampling_params, trajectory, **kwargs):
        seen.append((kwargs["extra_info"], patches.SESSION.get()))
        return "output"

    wrapped = patches._identified_sessions(original)
    row = {"index": 4, "kind": "flat"}
    trajectory = {"step": 3, "sample_index": 4, "rollout_n": 1, "validate": False}
    assert asyncio.run(wrapped(None, {}, trajectory, extra_info=row, session_id=0)) == "output"
    (extra_info, session), = seen
    assert extra_info == {"index": 4, "kind": "flat", patches.SESSION_KEY: "train-3-4-1-0"}
    assert session == "train-3-4-1-0"
    assert row == {"index": 4, "kind": "flat"}  # the batch's own row is not changed


def test_policy_metrics_by_hand():
    spec = {"prompts": [
        {"kind": "informative", "quality": [1.0, -1.0, 0.5], "start": [1 / 3] * 3},
        {"kind": "informative", "quality": [0.0, 2.0, 0.0], "start": [1 / 3] * 3},
        {"kind": "flat", "quality": [0.0] * 3, "start": [0.5, 0.25, 0.25]},
    ]}
    probs = [[1 / 3] * 3, [0.0, 1.0, 0.0], [0.5, 0.5, 0.0]]
    metrics = noisy_task.policy_metrics(spec, probs)
    assert math.isclose(metrics[P + "informative_true_reward"], ((1 - 1 + 0.5) / 3 + 2.0) / 2)
    assert math.isclose(metrics[P + "informative_entropy"], math.log(3) / 2)
    assert math.isclose(metrics[P + "flat_entropy"], math.log(2))
    assert math.isclose(metrics[P + "informative_kl_from_start"], math.log(3) / 2)  # KL(point || uniform) = ln 3
    assert math.isclose(metrics[P + "flat_kl_from_start"], 0.5 * math.log(1.0) + 0.5 * math.log(2.0))
    # total variation of the flat prompt against each informative one: (1/6 + 1/6 + 1/3) / 2 and (1/2 + 1/2) / 2
    assert math.isclose(metrics[P + "flat_informative_tv"], (1 / 3 + 1 / 2) / 2)
    assert noisy_analysis.best_quality(spec) == pytest.approx((1.0 + 2.0) / 2)
    assert noisy_analysis.prompt_blind_quality(spec) == pytest.approx(max((1 + 0) / 2, (-1 + 2) / 2, (0.5 + 0) / 2))


def test_batch_metrics_by_hand():
    spec = {"prompts": [{"ids": [1, 4, 6, 2, 1], "kind": "informative", "quality": [0.0] * 14 + [1.5] + [0.0] * 9},
                        {"ids": [1, 5, 6, 2, 1], "kind": "flat", "quality": [0.0] * 24}]}
    prompts = torch.tensor([[1, 4, 6, 2, 1, 0], [0, 1, 4, 6, 2, 1], [1, 5, 6, 2, 1, 0]])  # pad id 0, either side
    responses = torch.tensor([[14], [15], [14]])
    mask = torch.ones(3, 1)
    advantages = torch.tensor([[2.0], [-1.0], [0.5]])
    scores = torch.tensor([[1.6], [-0.1], [0.2]])
    metrics = noisy_task.batch_metrics(spec, prompts, responses, mask, advantages, scores)
    assert math.isclose(metrics[P + "informative_adv_rms"], math.sqrt((4 + 1) / 2))
    assert math.isclose(metrics[P + "flat_adv_rms"], 0.5)
    noise = torch.tensor([1.6 - 1.5, -0.1, 0.2], dtype=torch.float64)
    assert math.isclose(metrics[P + "noise_std_sampled"], float(noise.std()), rel_tol=1e-6)
    with pytest.raises(noisy_task.NoisyTaskError, match="not a prompt of task.json"):
        noisy_task.batch_metrics(spec, torch.tensor([[1, 9, 9, 2, 1]]), responses[:1], mask[:1], advantages[:1],
                                 scores[:1])


def test_paired_statistics_by_hand():
    assert stats.sign_test([0.1, 0.2, 0.3, 0.4, 0.5]) == 2 / 32  # 5 of 5 positive: the smallest p of 5 seeds
    assert stats.sign_test([1.0] * 6) == 2 / 64
    assert stats.sign_test([1.0, 2.0, -3.0]) == 1.0  # 2 * (C(3,0) + C(3,1)) / 8, capped at 1
    assert stats.sign_test([1.0, 0.0, 2.0, 3.0, 4.0, 5.0]) == 2 / 32  # zeros do not count
    assert stats.sign_test([0.0, 0.0]) == 1.0
    # sign flips of 1, 2, 3: sums 6, 4, 2, 0, 0, -2, -4, -6
    assert stats.sign_flip_test([1.0, 2.0, 3.0]) == 2 / 8
    assert stats.sign_flip_test([1.0, -2.0, 3.0]) == 6 / 8  # |sum| 2: all but the two zeros
    assert stats.sign_flip_test([0.1, 0.2, -0.3]) == 1.0  # observed sum 0 up to rounding
    assert stats.sign_flip_test([0.1, 0.2, 0.3, 0.4, 0.5]) == 2 / 32
    assert stats.sign_flip_test([]) == 1.0
    # the flat KL of the first 5 seeds (issue 40): flipping +0.055 gives |sum| 2.399, the observed one itself,
    # so 4 of the 32 assignments are as extreme: p = 0.125 where the sign test gives 0.375
    flat_kl = [-0.276, -0.788, -0.467, 0.055, -0.923]
    assert stats.sign_flip_test(flat_kl) == 4 / 32 and stats.sign_test(flat_kl) == 12 / 32
    # Student t: df 1 is Cauchy, df 2 has P(|T| <= t) = t / sqrt(2 + t^2), df 3 at sqrt(3) is 1/2 + 1/pi
    assert stats.t_quantile(0.95, 1) == pytest.approx(math.tan(0.475 * math.pi), rel=1e-12)
    assert stats.t_quantile(0.95, 2) == pytest.approx(math.sqrt(2) * 0.95 / math.sqrt(1 - 0.95 ** 2), rel=1e-12)
    assert stats.t_cdf_two_sided(math.sqrt(3), 3) == pytest.approx(0.5 + 1 / math.pi, rel=1e-14)
    assert stats.t_cdf_two_sided(1.0, 4) == pytest.approx(1 / math.sqrt(5) * (1 + 0.5 * 4 / 5), rel=1e-14)
    low, high = stats.t_interval([1.0, 2.0, 3.0])  # mean 2, s 1, n 3
    half = math.sqrt(2) * 0.95 / math.sqrt(1 - 0.95 ** 2) / math.sqrt(3)
    assert (low, high) == (pytest.approx(2 - half, rel=1e-12), pytest.approx(2 + half, rel=1e-12))
    assert stats.t_interval([0.5]) == []
    with pytest.raises(ValueError, match="level 1"):
        stats.t_quantile(1, 3)
    # the exact percentile bootstrap against every one of the n^n ordered resamples, each of weight n^-n
    import itertools

    for diffs in ([0.3, -1.2, 2.5, 0.7], [-0.36, -0.715, -0.445, 0.388, -0.867]):
        n = len(diffs)
        means = sorted(sum(diffs[i] for i in pick) / n for pick in itertools.product(range(n), repeat=n))
        # the smallest mean whose cumulative share reaches 2.5% and 97.5%: the ceil(q n^n)-th of the sorted means
        expected = [means[math.ceil(q * n ** n) - 1] for q in (0.025, 0.975)]
        assert stats.bootstrap_interval(diffs) == pytest.approx(expected, rel=1e-12)
    assert stats.bootstrap_interval([0.5]) == []
    result = stats.paired([1.0, 2.0, 3.0], [0.5, 2.5, 1.0])
    assert result["per_seed"] == [0.5, -0.5, 2.0] and (result["positive"], result["negative"]) == (2, 1)
    assert result["diff_mean"] == pytest.approx(2 / 3) and result["sign_test_p"] == 1.0
    assert result["sign_flip_p"] == 6 / 8  # sums of +-0.5 +-0.5 +-2: 3, 2, 2, 1 and mirrors; 6 reach |2|


def test_paired_statistics_against_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 4, 7, 8, 15):
        assert stats.t_quantile(0.95, df) == pytest.approx(scipy_stats.t.ppf(0.975, df), rel=1e-12)
        for t in (0.1, 1.0, 2.5, 40.0):
            assert stats.t_cdf_two_sided(t, df) == pytest.approx(1 - 2 * scipy_stats.t.sf(t, df), abs=1e-14)
    diffs = [-0.135, -0.148, -0.338, -0.444, -0.154, 0.02, -0.3, -0.1]
    interval = scipy_stats.ttest_1samp(diffs, 0).confidence_interval(0.95)
    assert stats.t_interval(diffs) == [pytest.approx(interval.low, rel=1e-12), pytest.approx(interval.high, rel=1e-12)]
    exact = scipy_stats.permutation_test((diffs,), lambda x: sum(x), permutation_type="samples",
                                         n_resamples=math.inf, alternative="two-sided").pvalue
    assert stats.sign_flip_test(diffs) == pytest.approx(exact, rel=1e-12)
    assert stats.sign_test(diffs) == pytest.approx(scipy_stats.binomtest(1, 8).pvalue, rel=1e-12)


def test_the_verdicts_rule_by_hand():
    answer = noisy_analysis.answer
    assert answer({"per_seed": [0.1, 0.2, 0.3]}, 1) == "yes"
    assert answer({"per_seed": [-0.1, -0.2, -0.3]}, -1) == "yes"
    assert answer({"per_seed": [-0.1, -0.2, -0.3]}, 1) == "no"
    assert answer({"per_seed": [0.1, -0.2, 0.3]}, 1) == "mixed"
    assert answer({"per_seed": [0.1, 0.0, 0.3]}, 1) == "mixed"  # a tie is not the claimed sign
    assert answer({"per_seed": []}, 1) == "mixed"
    # against: the opposite sign in at least 7 of 8 seeds and the t-interval wholly on that side (issue 52)
    adamw_flat = [-0.276, -0.788, -0.467, 0.055, -0.923, -0.292, -0.494, -0.426]  # the AdamW runs' flat KL
    assert answer(stats.paired(adamw_flat, [0.0] * 8), 1) == "against"
    assert answer(stats.paired(adamw_flat, [0.0] * 8), -1) == "mixed"  # the claimed sign in 7 of 8 is no yes
    six = [-1.0, -1.1, -0.9, -1.2, -1.0, -0.8, 0.1, 0.2]  # 6 of 8 opposite: not enough seeds
    assert stats.t_interval(six)[1] < 0 and answer(stats.paired(six, [0.0] * 8), 1) == "mixed"
    wide = [-0.1, -0.1, -0.1, -0.1, -0.1, -0.1, -0.1, 5.0]  # 7 of 8 opposite, the interval crosses 0
    assert stats.t_interval(wide)[0] < 0 < stats.t_interval(wide)[1] and answer(stats.paired(wide, [0.0] * 8), 1) \
        == "mixed"
    assert answer({"per_seed": [-0.1], "t_95": []}, 1) == "no"  # every seed (one) opposite
    plain = noisy_analysis.plain
    assert plain({"flat_moved_more": "yes", "informative_reward_lower_for_grpo": "yes"}) == "yes"
    assert plain({"flat_moved_more": "mixed", "informative_reward_lower_for_grpo": "yes"}) == "partly"
    assert plain({"flat_moved_more": "mixed", "informative_reward_lower_for_grpo": "mixed"}) == "not shown"
    assert plain({"flat_moved_more": "against", "informative_reward_lower_for_grpo": "yes"}) == \
        "contradicted: flat prompts moved less under GRPO"
    assert plain({"flat_moved_more": "no", "informative_reward_lower_for_grpo": "against"}) == \
        "contradicted: flat prompts moved less under GRPO; GRPO learned the informative prompts faster"
    assert noisy_analysis.PRIMARY == ("flat_kl_from_start", "informative_true_reward")


def _record(key, seed, flat_kl, reward, steps=6, noise_std=0.1):
    method = next(m for m in METHODS if m.key == key)
    values = lambda value: [(s, value) for s in range(1, steps + 1)]  # noqa: E731
    metrics = {tag: values(0.5) for tag in noisy_task.METRICS}
    metrics.update({P + "flat_kl_from_start": values(flat_kl), P + "informative_true_reward": values(reward),
                    P + "flat_entropy": values(3.0 - flat_kl)})
    return {"method": {"key": method.key, "label": method.label, "estimator": method.estimator, "ours": method.ours},
            "seed": seed, "steps": steps, "lr": 0.01, "noise_std": noise_std, "seconds": 10.0, "proof": "p",
            "metrics": metrics}


def results_part(out):
    """The headline words (the noise's part) of a written results.json."""
    return next(iter(json.loads((out / "results.json").read_text())["noise_part"].values()))["answers"]


def test_summary_verdict_and_written_files(tmp_path, spec):
    records = [_record("verl_grpo", 0, 1.0, 0.4), _record("verl_grpo", 1, 0.8, 0.5),
               _record("ours_baseline", 0, 0.2, 0.5), _record("ours_baseline", 1, 0.4, 0.6),
               _record("verl_baseline", 0, 0.25, 0.5), _record("verl_baseline", 1, 0.35, 0.6)]
    start = noisy_analysis.initial(spec)
    table = noisy_analysis.summarize_noisy(records, start)
    grpo = table["0.01"]["verl_grpo"]
    assert grpo["flat_kl_from_start"]["mean"] == pytest.approx(0.9)
    assert grpo["flat_entropy_drop"]["per_seed"] == pytest.approx([start[P + "flat_entropy"] - 2.0,
                                                                   start[P + "flat_entropy"] - 2.2])
    assert grpo["informative_reward_rise"]["per_seed"] == [0.0, 0.0]  # constant synthetic series
    verdict = noisy_analysis.verdicts(table)["0.01"]
    assert verdict["answers"] == {"noise_as_signal": "mixed", "flat_moved_more": "yes",  # equal flat adv rms 0.5
                                  "informative_reward_lower_for_grpo": "yes"}
    assert verdict["plain"] == "yes" and verdict["flat_kl_from_start"]["per_seed"] == pytest.approx([0.8, 0.4])
    assert verdict["flat_kl_from_start"]["ratio"] == pytest.approx(3.0)
    assert verdict["control"]["flat_kl_from_start"]["per_seed"] == pytest.approx([-0.05, 0.05])
    grpo_moved_less = [_record("verl_grpo", 0, 0.1, 0.4), _record("ours_baseline", 0, 0.2, 0.5)]
    moved_less = noisy_analysis.verdicts(noisy_analysis.summarize_noisy(grpo_moved_less, start))["0.01"]
    assert moved_less["answers"]["flat_moved_more"] == "no"
    assert moved_less["plain"] == "contradicted: flat prompts moved less under GRPO"
    control = (_record("verl_grpo", 0, 0.3, 0.45, noise_std=0.0), _record("ours_baseline", 0, 0.15, 0.5, noise_std=0.0))
    clean = noisy_analysis.summarize_noisy(list(control), start)
    effect = noisy_analysis.noise_effect(table, clean)["0.01"]
    assert effect["verl_grpo"]["seeds"] == [0]
    assert effect["verl_grpo"]["flat_kl_from_start"]["per_seed"] == pytest.approx([0.7])
    assert effect["ours_baseline"]["informative_true_reward"]["diff_mean"] == pytest.approx(0.0)
    # seed 0: GRPO minus ours noise-free -0.05, noisy -0.1: the noise's part -0.05, half of the noisy difference
    part = noisy_analysis.noise_part(table, clean)["0.01"]
    assert part["seeds"] == [0]
    reward = part["informative_true_reward"]
    assert reward["noise_free"]["per_seed"] == pytest.approx([-0.05])
    assert reward["noisy"]["per_seed"] == pytest.approx([-0.1])
    assert reward["noise_part"]["per_seed"] == pytest.approx([-0.05]) and reward["share"] == pytest.approx(0.5)
    noisy_report.write_noisy_report(tmp_path, records, spec, control=control)
    for name in ("noisy_lr0.01.png", "noise_free_lr0.01.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    text = (tmp_path / "report.md").read_text()
    assert "| verl GRPO | 2 | 0.450 ± 0.071 |" in text
    assert "with this model, at lr 0.01? Yes**: the noise's part of the flat prompts' movement: yes; of the " \
           "informative prompts' slowdown: yes." in text  # the headline: the noise's part (seed 0, run both ways)
    assert results_part(tmp_path) == {"flat_moved_more": "yes", "informative_reward_lower_for_grpo": "yes"}
    assert "- GRPO's flat advantages are larger (noise presented as signal); endpoint flat advantage rms: " \
           "**mixed**. GRPO 0.500" in text
    assert "(true reward in every seed) at least 1.6, the level AdamW's rate was chosen for (this report): **no**; " \
           "at least 1, the level plain SGD's rate was chosen for: **no** (per seed 0.500)." in text
    assert "`verl-rfpp curves --task noisy --design separate --out DIR --steps 6 --seeds 2 --control 1 " \
           "--lrs 0.01`" in text
    assert "  - the noise's part: -0.050 ± 0.000 (per seed -0.050; 0 of 1 positive; sign-flip p = 1.000, sign " \
           "test p = 1.000; no t-interval)." in text
    assert "% of the noisy difference" not in text  # a share with no interval is not printed (issue 52)
    assert "bootstrap [" not in text
    results = json.loads((tmp_path / "results.json").read_text())
    assert len(results["runs"]) == 8 and results["verdicts"]["0.01"]["answers"]["flat_moved_more"] == "yes"
    assert "verl GRPO, noisy minus noise-free (seeds [0]):\n- flat entropy drop (nats): +0.700 ± 0.000" in text
    assert "- flat KL from start: +0.700 ± 0.000 (per seed +0.700; 1 of 1 positive; sign-flip p = 1.000, sign test " \
           "p = 1.000; no t-interval)" in text
    assert results["noise_effect"]["0.01"]["verl_grpo"]["flat_kl_from_start"]["per_seed"] == pytest.approx([0.7])
    schema = (Path(__file__).resolve().parents[2] / "docs" / "curves" / "noisy" / "schema.md").read_text()
    keys = set(results) | set(results["settings"]) | set(results["summary"]["0.01"]["verl_grpo"])
    keys |= set(results["verdicts"]["0.01"]) | set(results["verdicts"]["0.01"]["flat_kl_from_start"])
    keys |= set(results["verdicts"]["0.01"]["answers"])
    keys |= set(results["runs"][0]) | set(results["runs"][0]["metrics"])
    keys |= set(results["noise_effect"]["0.01"]["verl_grpo"])
    keys |= set(results["noise_part"]["0.01"]) | set(results["noise_part"]["0.01"]["flat_kl_from_start"])
    keys |= set(results["matched"]["0.01"]["0.5"])
    undocumented = sorted(k for k in keys if f"`{k}`" not in schema)
    assert not undocumented, f"docs/curves/noisy/schema.md lacks {undocumented}"


def test_matched_progress_by_hand():
    """The flat KL where each method first reaches each level, from every step's probe."""
    def run(key, seed, rewards, kls):
        record = _record(key, seed, 0.0, 0.0, steps=len(rewards))
        record["metrics"][P + "informative_true_reward"] = list(enumerate(rewards, start=1))
        record["metrics"][P + "flat_kl_from_start"] = list(enumerate(kls, start=1))
        return record

    records = [run("verl_grpo", 0, [0.2, 0.6, 1.1, 1.2], [0.1, 0.3, 0.5, 0.9]),
               run("ours_baseline", 0, [0.5, 1.0, 1.4, 1.45], [0.2, 0.4, 0.6, 0.8]),
               run("verl_grpo", 1, [0.6, 0.7, 0.8, 0.9], [0.1, 0.2, 0.3, 0.4]),
               run("ours_baseline", 1, [0.1, 0.5, 1.2, 1.6], [0.05, 0.15, 0.25, 0.35])]
    assert noisy_analysis.first_reaching(records[0], 0.5) == 2
    assert noisy_analysis.first_reaching(records[0], 1.5) is None
    table = noisy_analysis.matched(records)["0.01"]
    half = table["0.5"]  # GRPO at steps 2 and 1, ours at 1 and 2
    assert half["seeds"] == [0, 1] and half["steps"] == {"verl_grpo": [2, 1], "ours_baseline": [1, 2]}
    assert half["difference"]["per_seed"] == pytest.approx([0.3 - 0.2, 0.1 - 0.15])
    one = table["1"]  # GRPO never reaches 1.0 in seed 1
    assert one["seeds"] == [0] and one["not_reached"] == [1] and one["steps"]["verl_grpo"] == [3]
    assert one["difference"]["per_seed"] == pytest.approx([0.5 - 0.4])
    assert table["1.5"]["seeds"] == []


def test_the_command_line_names_one_command_per_seed_count():
    records = [_record(key, seed, 0.1, 0.1) for key in ("verl_grpo", "ours_baseline") for seed in range(3)]
    records += [_record("verl_baseline", seed, 0.1, 0.1) for seed in range(2)]
    control = tuple({**r, "noise_std": 0.0} for r in records)
    assert noisy_report.command_line("separate", records, control) == (
        "`verl-rfpp curves --task noisy --design separate --out DIR --steps 6 --seeds 2 --control 2 --lrs 0.01`, then "
        "`verl-rfpp curves --task noisy --design separate --out DIR --steps 6 --seeds 3 --control 3 --lrs 0.01 "
        "--methods ours_baseline verl_grpo`")


COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "curves" / "noisy"


@pytest.mark.parametrize(("optimizer", "armed"), [(o, False) for o in sorted(noisy_task.OPTIMIZERS)] + [("sgd", True)])
def test_the_committed_report_and_results_are_what_the_rule_says(spec, optimizer, armed):
    """Every word and number of the optimizer's report's generated part (report.md, sgd-report.md,
    and sgd-own-rate-report.md once the own-rate arm's runs all exist), its results.json's summaries
    and verdicts, and docs/bandit.md's paragraph on these runs are recomputed from the results.json's
    runs: a sentence that disagrees with them fails here."""
    name = lambda file: noisy_report.output_name(noisy_task.SEPARATE.key, file, optimizer, armed)  # noqa: E731
    if armed and not (COMMITTED / name("results.json")).exists():
        pytest.skip("the own-rate arm's runs are not all made yet (docs/curves/noisy/sgd-own-rate-runs.json)")
    records, control = noisy_report.load(COMMITTED / name("results.json"))
    assert {noisy_runs.optimizer_of(r) for r in (*records, *control)} == {optimizer}
    saved = json.loads((COMMITTED / name("results.json")).read_text())
    recomputed = json.loads(json.dumps(noisy_report.results(records, spec, control)))
    for key in ("summary", "verdicts", "control_summary", "noise_effect", "noise_part", "matched", "matched_noise_part",
                "channels"):
        assert recomputed[key] == saved[key], key
    text = (COMMITTED / name("report.md")).read_text()
    written_by = text.split("Written by ", 1)[1].split(": ", 1)[0] if armed else ""
    generated = noisy_report.noisy_report_text(records, spec, control, written_by)
    assert text.startswith(generated), f"docs/curves/noisy/{name('report.md')} differs from what its results.json gives"
    words = " ".join(text[len(generated):].split())
    for claim in noisy_analysis.CLAIMS:  # the hand-written notes repeat no verdict
        assert claim.text not in words
    paragraph = (COMMITTED / name("bandit-paragraph.txt")).read_text()  # what write_noisy_report wrote
    assert paragraph == noisy_report.bandit_paragraph(saved) + "\n"
    bandit = " ".join((COMMITTED.parents[1] / "bandit.md").read_text().split())
    assert " ".join(paragraph.split()) in bandit


def test_the_hand_written_why_names_the_channel_the_rule_found():
    """report.md's hand-written "Why" section names the channel the AdamW runs' rule found and
    withdraws the AdamW explanation, as results.json's channel words say."""
    saved = json.loads((COMMITTED / "results.json").read_text())
    text = (COMMITTED / "report.md").read_text()
    cells = next(iter(saved["channels"].values()))
    assert "## Why the baseline's flat prompts moved: through the shared layers, measured" in text
    assert "**The\nAdamW explanation, which was about those rows, is withdrawn by the rule.**" in text
    for key in (noisy_analysis.GRPO, noisy_analysis.OURS):
        assert cells[key]["flat_kl_rows_reset"]["carries"] == "yes", key  # what the shared layers moved
        assert cells[key]["flat_kl_shared_reset"]["carries"] == "no", key  # what their own rows moved


def test_quick_run_refuses_bad_arguments(tmp_path, capsys):
    assert cli.main(["curves", "--task", "noisy", "--out", str(tmp_path), "--methods", "ppo"]) == 2
    assert "unknown method(s) ppo" in capsys.readouterr().out
    assert cli.main(["curves", "--task", "noisy", "--out", str(tmp_path), "--lrs", "0"]) == 2
    assert "must be positive" in capsys.readouterr().out
    assert not (tmp_path / "runs").exists()
