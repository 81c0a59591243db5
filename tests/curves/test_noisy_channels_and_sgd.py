"""``verl-rfpp curves --task noisy``: the channel probe (which parameters moved the flat prompts:
the rollout server's ``counterfactual_probs``, ``noisy.task.channel_metrics``, the channel rule and
its words in the report) and the SGD arm (``--optimizer sgd``: verl's config and optimizer, file
and run names apart from AdamW's). The probe in verl's trainer: tests/e2e/test_curves_noisy_run.py."""

from __future__ import annotations

import argparse
import copy
import json
import math
from pathlib import Path

import pytest
import torch

from verl_rfpp.experiments.noisy import analysis as noisy_analysis
from verl_rfpp.experiments.noisy import command as noisy
from verl_rfpp.experiments.noisy import plan as noisy_plan
from verl_rfpp.experiments.noisy import report as noisy_report
from verl_rfpp.experiments.noisy import runs as noisy_runs
from verl_rfpp.experiments.noisy import task as noisy_task
from verl_rfpp.experiments.runs import METHODS

P = noisy_task.PREFIX
DOCS = Path(__file__).resolve().parents[2] / "docs" / "curves" / "noisy"


def _probs(model, prompt_ids):
    with torch.no_grad():
        return [torch.softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].double(), dim=-1)
                for ids in prompt_ids]


def test_own_rows_are_the_tokens_only_flat_prompts_have(spec):
    rows = noisy_task.own_rows(spec)
    flat = [row["ids"][-1] for row in spec["prompts"] if row["kind"] == "flat"]
    assert rows == sorted(flat) and len(rows) == 8
    assert not set(rows) & {t for row in spec["prompts"] if row["kind"] == "informative" for t in row["ids"]}


def test_counterfactual_probs_mix_the_trained_and_the_start_weights_and_change_nothing(spec):
    """The rollout server's two mixed models against models mixed here by hand from the start
    weights and a perturbed copy; the server's own weights and torch's random stream untouched."""
    from transformers import AutoModelForCausalLM

    from verl_rfpp.cpu.rollout import HFRolloutServer

    server = HFRolloutServer(spec["model"], prompt_length=8, response_length=1)
    start = AutoModelForCausalLM.from_pretrained(spec["model"], dtype="float32")
    generator = torch.Generator().manual_seed(7)
    trained = {name: value + 0.3 * torch.randn(value.shape, generator=generator)
               for name, value in start.state_dict().items()}
    server.load_weights(trained, global_steps=3)
    ids = [row["ids"] for row in spec["prompts"]]
    rows = noisy_task.own_rows(spec)
    before = {name: value.clone() for name, value in server.model.state_dict().items()}
    rng = torch.get_rng_state()
    step, mixed = server.counterfactual_probs(ids, rows)
    assert step == 3 and torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(before[name], value) for name, value in server.model.state_dict().items())
    embedding = "model.embed_tokens.weight"
    for name, rows_from, rest_from in (("rows_reset", start.state_dict(), trained),
                                       ("shared_reset", trained, start.state_dict())):
        by_hand = copy.deepcopy(start)
        state = {key: value.clone() for key, value in rest_from.items()}
        state[embedding][rows] = rows_from[embedding][rows]
        by_hand.load_state_dict(state)
        expected = _probs(by_hand, ids)
        assert len(mixed[name]) == len(ids)
        for got, want in zip(mixed[name], expected, strict=True):
            assert torch.allclose(torch.tensor(got, dtype=torch.float64), want, atol=1e-12), name
    _, none_mixed = server.counterfactual_probs(ids, [])  # no rows: the trained model, and the start
    _, trained_probs = server.next_token_probs(ids)
    assert none_mixed["rows_reset"] == trained_probs
    for got, row in zip(none_mixed["shared_reset"], spec["prompts"], strict=True):
        assert got == pytest.approx(row["start"], abs=1e-9)


def test_channel_metrics_by_hand(spec):
    """Mean over the flat prompts of KL(pi || pi_start), in nats, computed here from its definition."""
    start = [row["start"] for row in spec["prompts"]]
    flat = [i for i, row in enumerate(spec["prompts"]) if row["kind"] == "flat"]
    moved = []
    for i, row in enumerate(spec["prompts"]):
        p = [0.0] * len(row["start"])
        p[i % len(p)] = 0.5
        p[(i + 1) % len(p)] = 0.5
        moved.append(p)
    got = noisy_task.channel_metrics(spec, start, moved)
    assert got[P + "flat_kl_rows_reset"] == 0.0
    by_hand = sum(0.5 * (math.log(0.5) - math.log(start[i][i % len(start[i])]))
                  + 0.5 * (math.log(0.5) - math.log(start[i][(i + 1) % len(start[i])])) for i in flat) / len(flat)
    assert got[P + "flat_kl_shared_reset"] == pytest.approx(by_hand, rel=1e-12)


def _record(key, seed, flat_kl, rows_reset, shared_reset, steps=6, optimizer=None):
    method = next(m for m in METHODS if m.key == key)
    values = lambda value: [(s, value) for s in range(1, steps + 1)]  # noqa: E731
    metrics = {tag: values(0.5) for tag in noisy_task.METRICS}
    metrics.update({P + "flat_kl_from_start": values(flat_kl), P + "flat_kl_rows_reset": values(rows_reset),
                    P + "flat_kl_shared_reset": values(shared_reset)})
    record = {"method": {"key": method.key, "label": method.label, "estimator": method.estimator,
                         "ours": method.ours},
              "seed": seed, "steps": steps, "lr": 0.01, "noise_std": 0.1, "seconds": 10.0, "proof": "p",
              "metrics": metrics}
    if optimizer:
        record["optimizer"] = optimizer
    return record


def test_the_channel_rule_its_words_and_the_explanation_it_keeps_or_withdraws(tmp_path, spec):
    """Shares of the flat KL each mixed model keeps: at least 0.5 in every seed is yes, below in
    every seed no, else mixed; the AdamW explanation is kept only when the rows carry it for both
    GRPO and ours. The report prints the words, results.json holds them, schema.md documents them."""
    assert [noisy_analysis.carried(x) for x in ([0.5, 0.9], [0.1, 0.49], [0.2, 0.8], [])] == \
        ["yes", "no", "mixed", "mixed"]
    records = [_record("verl_grpo", 0, 2.0, 1.6, 0.2), _record("verl_grpo", 1, 1.0, 0.7, 0.1),
               _record("ours_baseline", 0, 3.0, 0.3, 2.4), _record("ours_baseline", 1, 2.0, 0.4, 0.9),
               _record("verl_baseline", 0, 3.0, 0.3, 2.4)]
    table = noisy_analysis.summarize_noisy(records, noisy_analysis.initial(spec))
    cells = noisy_analysis.channels(table)["0.01"]
    grpo, ours = cells["verl_grpo"], cells["ours_baseline"]
    assert grpo["flat_kl_rows_reset"]["share"] == pytest.approx([0.8, 0.7])
    assert grpo["flat_kl_rows_reset"]["carries"] == "yes" and grpo["flat_kl_shared_reset"]["carries"] == "no"
    assert ours["flat_kl_shared_reset"]["share"] == pytest.approx([0.8, 0.45])
    assert ours["flat_kl_shared_reset"]["carries"] == "mixed" and ours["flat_kl_rows_reset"]["carries"] == "no"
    assert cells["grpo_minus_ours"]["flat_kl_shared_reset"]["per_seed"] == pytest.approx([-2.2, -0.8])
    assert noisy_analysis.rows_explanation(cells) == "withdrawn"
    kept = {key: {"flat_kl_shared_reset": {"carries": "yes"}} for key in ("verl_grpo", "ours_baseline")}
    assert noisy_analysis.rows_explanation(kept) == "kept"
    assert noisy_analysis.rows_explanation({"verl_grpo": kept["verl_grpo"]}) == "withdrawn"
    noisy_report.write_noisy_report(tmp_path, records, spec)
    text = (tmp_path / "report.md").read_text()
    assert "## Which channel moved the flat prompts, lr 0.01" in text
    assert ("  - the flat prompts' own input rows alone: 1.650 (per seed 2.400, 0.900; share 80%, 45%): carries "
            "it: **mixed**.") in text
    assert "by the rule it is **withdrawn**" in text
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["channels"]["0.01"]["verl_grpo"]["flat_kl_rows_reset"]["carries"] == "yes"
    schema = (Path(__file__).resolve().parents[2] / "docs" / "curves" / "noisy" / "schema.md").read_text()
    keys = set(results["channels"]["0.01"]["verl_grpo"]) | set(results["channels"]["0.01"]["verl_grpo"][
        "flat_kl_rows_reset"]) | {"grpo_minus_ours", "channels"}
    assert not sorted(k for k in keys if f"`{k}`" not in schema)


def test_the_sgd_arm_composes_in_verl_and_builds_torch_sgd(tmp_path, spec):
    """The overrides of an SGD run, composed by Hydra as main_ppo does, give verl's actor an SGD
    optimizer config that verl's own ``build_optimizer`` turns into ``torch.optim.SGD``, weight
    decay 0, at the design's SGD rate; AdamW's runs are unchanged."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config.optimizer import build_optimizer

    from verl_rfpp.adapter.compose import compose_verl_config

    design = noisy_task.SEPARATE
    paths = {"train": tmp_path / "train.parquet", "test": tmp_path / "test.parquet"}
    built = {}
    for optimizer in ("adamw", "sgd"):
        overrides = noisy_runs.overrides(paths, spec, design.lr_of(optimizer), design, optimizer)
        config = compose_verl_config(overrides)
        built[optimizer] = build_optimizer([torch.nn.Parameter(torch.zeros(2))],
                                           omega_conf_to_dataclass(config.actor_rollout_ref.actor.optim))
    assert type(built["sgd"]) is torch.optim.SGD and type(built["adamw"]) is torch.optim.AdamW
    assert built["sgd"].defaults["lr"] == design.sgd_lr == 0.15 and built["sgd"].defaults["weight_decay"] == 0
    assert built["adamw"].defaults["lr"] == design.lr and built["adamw"].defaults["weight_decay"] == 0.01


def test_sgd_runs_and_files_are_named_apart_from_adamw_s(tmp_path, spec):
    design, method = noisy_task.SEPARATE, next(m for m in METHODS if m.key == "ours_baseline")
    assert noisy_runs.run_dir(tmp_path, design, method, 0.15, 0.1, 2, "sgd").name == \
        "separate_ours_baseline_sgd_lr0.15_noise0.1_seed2"
    assert noisy_runs.run_dir(tmp_path, design, method, 0.005, 0.1, 2).name == \
        "separate_ours_baseline_lr0.005_noise0.1_seed2"  # the committed runs' names
    assert [noisy_report.output_name(d, "report.md", o) for d, o in
            (("separate", "adamw"), ("separate", "sgd"), ("shared", "adamw"), ("shared", "sgd"))] == \
        ["report.md", "sgd-report.md", "shared-report.md", "shared-sgd-report.md"]
    for optimizer, record in (("adamw", _record("ours_baseline", 0, 1, 1, 1)),
                              ("sgd", _record("ours_baseline", 0, 1, 1, 1, optimizer="sgd"))):
        directory = noisy_runs.run_dir(tmp_path, design, method, 0.01, 0.1, 0, optimizer)
        directory.mkdir(parents=True)
        (directory / "run.json").write_text(json.dumps({**record, "design": design.key}))
    found = {o: noisy_runs.finished(tmp_path, design, 6, (0.01,), 0.1, o) for o in ("adamw", "sgd")}
    assert [noisy_runs.optimizer_of(r) for r in found["adamw"]] == ["adamw"]
    assert [r["optimizer"] for r in found["sgd"]] == ["sgd"]
    sgd = [_record(key, 0, 1, 1, 1, optimizer="sgd") for key in ("verl_grpo", "ours_baseline")]
    for r in sgd:
        r["lr"] = design.sgd_lr
    assert noisy_report.command_line("separate", sgd) == (
        "`verl-rfpp curves --task noisy --design separate --out DIR --steps 6 --seeds 1 --optimizer sgd "
        "--methods ours_baseline verl_grpo`")
    noisy_report.write_noisy_report(tmp_path / "out", sgd, spec)
    text = (tmp_path / "out" / "sgd-report.md").read_text()
    assert text.startswith("# Noisy rewards on prompts with nothing to learn, in verl's real trainer (CPU): design "
                           "`separate`, plain SGD")
    assert "AdamW" not in text and "(plain SGD, lr 0.15" in text
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["sgd-bandit-paragraph.txt", "sgd-noisy_lr0.15.png",
                                                                     "sgd-report.md", "sgd-results.json"]


def test_a_design_without_a_chosen_sgd_rate_is_refused_without_lrs():
    args = argparse.Namespace(methods=None, design="shared", optimizer="sgd", lrs=None, noise_std=0.1)
    assert "has no chosen --optimizer sgd learning rate; give one with --lrs" in noisy.noisy_problem(args)
    assert noisy.noisy_problem(argparse.Namespace(**{**vars(args), "lrs": [0.1]})) is None
    assert noisy.noisy_problem(argparse.Namespace(**{**vars(args), "design": "separate"})) is None


def test_restored_runs_are_the_ones_a_command_reuses(tmp_path):
    """``noisy.runs.restore``: a results.json's runs written where ``train_one`` reuses them (so it
    trains nothing) and ``finished`` reads them; written once; another run in a run's place refused."""
    committed = json.loads((DOCS / "results.json").read_text())["runs"]
    chosen = [r for r in committed if r["seed"] == 0 and r["noise_std"] == 0.1]
    assert len(chosen) == 3
    written = noisy_runs.restore(tmp_path, chosen)
    assert [p.parent.name for p in written] == [noisy_runs.run_dir(
        tmp_path, noisy_task.SEPARATE, next(m for m in METHODS if m.key == r["method"]["key"]), r["lr"], 0.1, 0).name
        for r in chosen]
    design = noisy_task.SEPARATE
    assert noisy_runs.finished(tmp_path, design, 40, (design.lr,), 0.1) == sorted(
        chosen, key=lambda r: [m.key for m in METHODS].index(r["method"]["key"]))
    method = next(m for m in METHODS if m.key == "verl_grpo")
    assert noisy_runs.train_one(method, 0, 40, design.lr, tmp_path, design, 0.1) == \
        next(r for r in chosen if r["method"]["key"] == "verl_grpo")
    assert noisy_runs.restore(tmp_path, chosen) == []
    other = {**chosen[0], "weights_sha256": "0" * 64}
    with pytest.raises(noisy_runs.CurvesError, match=f"holds a run with weights sha256 {chosen[0]['weights_sha256']}"):
        noisy_runs.restore(tmp_path, [other])


def test_the_committed_sgd_arm_is_the_planned_runs():
    """docs/curves/noisy/sgd-results.json holds the SGD arm as planned: GRPO and ours, noisy and
    noise-free, seeds 0-7, 40 steps at the design's SGD rate, each run once with its weights digest
    (its words and numbers: tests/curves/test_curves_noisy.py); report.md links it and states no
    SGD verdict by hand."""
    design = noisy_task.SEPARATE
    saved = json.loads((DOCS / "sgd-results.json").read_text())
    cells = sorted((r["method"]["key"], r["noise_std"], r["seed"]) for r in saved["runs"])
    assert cells == sorted((key, noise, seed) for key in ("verl_grpo", "ours_baseline") for noise in (0.1, 0.0)
                           for seed in range(8))
    for record in saved["runs"]:
        assert (record["optimizer"], record["lr"], record["steps"], record["design"]) == \
            ("sgd", design.sgd_lr, 40, design.key)
        assert set(record["metrics"]) <= set(noisy_report.KEPT) and set(noisy_task.METRICS) <= set(record["metrics"])
        assert len(record["weights_sha256"]) == 64
    assert saved["settings"]["noise_std"] == noisy_runs.NOISE_STD
    assert not (DOCS / "sgd-runs.json").exists()  # the partial record it replaces
    report = " ".join((DOCS / "report.md").read_text().split())
    assert "[sgd-report.md](sgd-report.md)" in report
    # the level the SGD rate was chosen for, stated before the runs, is the one its report reads against
    assert set(noisy_analysis.LEARNED) == set(noisy_task.OPTIMIZERS)  # a level for every optimizer, no other
    level = noisy_analysis.LEARNED["sgd"]
    assert f"its level lowered to {level:.1f} so that some rate meets it" in report
    assert f"reads against the level {level:.1f} stated above for the SGD rate" in report


def test_each_method_s_own_sgd_rate_is_the_criterion_on_the_committed_noise_free_runs():
    """issue 52: GRPO's SGD rate equalizes the informative advantages' rms with our baseline's at
    its rate, from the committed noise-free shared-rate runs (recomputed here from their metrics);
    the plan makes GRPO's 16 runs, noise-free first, and reuses our baseline's 16."""
    saved = json.loads((DOCS / "sgd-results.json").read_text())
    clean = [r for r in saved["runs"] if r["noise_std"] == 0]
    def run_rms(run):
        values = [v for _, v in run["metrics"][P + "informative_adv_rms"]]
        return sum(values) / len(values)

    rms = {key: sum(run_rms(r) for r in clean if r["method"]["key"] == key) / 8
           for key in ("verl_grpo", "ours_baseline")}
    assert rms["ours_baseline"] == pytest.approx(1.4054, abs=1e-4)
    assert rms["verl_grpo"] == pytest.approx(0.9268, abs=1e-4)
    assert 0.15 * rms["ours_baseline"] / rms["verl_grpo"] == pytest.approx(0.2275, abs=1e-4)  # 0.23 at 2 digits
    assert noisy_plan.own_rates(saved) == noisy_plan.OWN_RATES == {"ours_baseline": 0.15, "verl_grpo": 0.23}
    report = " ".join((DOCS / "report.md").read_text().split())  # the hand-written statement of the criterion
    assert (f"0.15 x {rms['ours_baseline']:.4f} / {rms['verl_grpo']:.4f} = "
            f"{0.15 * rms['ours_baseline'] / rms['verl_grpo']:.4f}, so **GRPO lr 0.23**") in report
    assert [noisy_plan.round_2(x) for x in (0.22745, 0.0049, 1.449)] == [0.23, 0.0049, 1.4]
    assert noisy_plan.plan() == [("verl_grpo", noise, seed) for noise in (0.0, 0.1) for seed in range(8)]
    assert sorted((r["noise_std"], r["seed"]) for r in noisy_plan.reused(saved)) == \
        sorted((noise, seed) for noise in (0.0, 0.1) for seed in range(8))


def test_the_plan_runner_makes_nothing_the_record_holds(tmp_path):
    """``run_plan`` restores the record's runs and trains only the planned cells it lacks: with every
    cell recorded it trains nothing and leaves the record as it was."""
    saved = json.loads((DOCS / "sgd-results.json").read_text())
    template = next(r for r in saved["runs"] if r["method"]["key"] == "verl_grpo")
    runs = [{**template, "lr": 0.23, "noise_std": noise, "seed": seed, "weights_sha256": f"{seed:064d}"}
            for _, noise, seed in noisy_plan.plan()]
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"runs": runs}))
    lines = []
    assert noisy_plan.run_plan(tmp_path / "out", record, lines.append)["runs"] == runs
    assert lines == [f"16 of 16 runs in {record}; making 0, one at a time, in {tmp_path / 'out'}"]
    assert len(list((tmp_path / "out" / "runs").glob("*/run.json"))) == 16


def test_an_arm_pairs_methods_run_at_different_rates(tmp_path, spec):
    """Runs marked with one ``arm`` (the own-rate SGD arm: GRPO and ours at their own rates) are
    summarized, paired and reported together, named ``own-rate``; unmarked runs keep their lr's
    key; ``noisy.plan.write_own_rate_report`` refuses before every planned run exists."""
    arm = "0.02 (GRPO) / 0.01 (ours)"

    def marked(key, seed, flat_kl, noise, lr):
        record = _record(key, seed, flat_kl, flat_kl, 0.0)
        return {**record, "noise_std": noise, "lr": lr, "arm": arm}

    noisy = [marked("verl_grpo", s, 1.0 + s, 0.1, 0.02) for s in (0, 1)]
    noisy += [marked("ours_baseline", s, 0.5, 0.1, 0.01) for s in (0, 1)]
    clean = [marked("verl_grpo", s, 0.2, 0.0, 0.02) for s in (0, 1)] + [marked("ours_baseline", s, 0.1, 0.0, 0.01)
                                                                        for s in (0, 1)]
    assert noisy_analysis.arm_of(noisy[0]) == arm and noisy_analysis.arm_of(_record("verl_grpo", 0, 1, 1, 1)) == "0.01"
    assert noisy_report.output_name("separate", "report.md", "sgd", armed=True) == "sgd-own-rate-report.md"
    assert noisy_report.lr_name(arm) == "0.02-grpo-0.01-ours" and noisy_report.lr_name("0.15") == "0.15"
    results = json.loads(json.dumps(noisy_report.results(noisy, spec, tuple(clean))))  # no plots: the suite stays fast
    assert results["verdicts"][arm]["flat_kl_from_start"]["per_seed"] == pytest.approx([0.5, 1.5])
    # the noise's part: (GRPO - ours) noisy minus noise-free, seed by seed: 0.5 - 0.1, 1.5 - 0.1
    assert results["noise_part"][arm]["flat_kl_from_start"]["noise_part"]["per_seed"] == pytest.approx([0.4, 1.4])
    text = noisy_report.noisy_report_text(noisy, spec, tuple(clean), written_by="`by hand`")
    assert "each method at its own rate (lr 0.02 (GRPO) / 0.01 (ours))" in text and "Written by `by hand`:" in text
    assert "![noisy rewards at lr 0.02 (GRPO) / 0.01 (ours)](own-rate-noisy_lr0.02-grpo-0.01-ours.png)" in text
    (tmp_path / "results.json").write_text(json.dumps(results))
    loaded = noisy_report.load(tmp_path / "results.json")  # the arm kept: a report is rewritten alike
    assert [(r["arm"], r["lr"]) for r in (*loaded[0], *loaded[1])] == [(arm, r["lr"]) for r in (*noisy, *clean)]
    with pytest.raises(ValueError, match="0 of 16 own-rate runs exist: no report"):
        noisy_plan.write_own_rate_report(tmp_path / "x", {"runs": []}, {"runs": []}, spec)
    assert not (tmp_path / "x").exists()


def test_the_committed_own_rate_record_holds_planned_runs_only():
    """docs/curves/noisy/sgd-own-rate-runs.json: the own-rate runs finished so far, each a planned
    cell once, at its method's own rate with SGD, 40 steps, the design's settings, its weights
    digest and the metrics results.json keeps; noise-free ones before any noisy one (the plan's
    order). No metric value of a noisy run is read here."""
    path = DOCS / "sgd-own-rate-runs.json"
    if not path.exists():
        pytest.skip("no own-rate run has finished yet")
    saved = json.loads(path.read_text())
    cells = [(r["method"]["key"], r["noise_std"], r["seed"]) for r in saved["runs"]]
    assert cells == noisy_plan.plan()[:len(cells)]  # in the plan's order, each once
    assert saved["rates"] == noisy_plan.OWN_RATES and [tuple(c) for c in saved["plan"]] == noisy_plan.plan()
    for record in saved["runs"]:
        assert (record["optimizer"], record["lr"], record["steps"], record["design"]) == \
            ("sgd", noisy_plan.OWN_RATES[record["method"]["key"]], 40, noisy_task.SEPARATE.key)
        assert set(record["metrics"]) <= set(noisy_report.KEPT) and set(noisy_task.METRICS) <= set(record["metrics"])
        assert len(record["weights_sha256"]) == 64 and "arm" not in record
