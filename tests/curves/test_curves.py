"""``verl-rfpp curves``: the report's numbers, the proof of which estimator ran, tensorboard
read-back (a real run of verl's built-in with the plugin excluded, through ``curves --task noisy``,
is tests/e2e/test_curves_noisy_run.py's e2e test)."""

from __future__ import annotations

import json

import pytest

from verl_rfpp.cli import main as cli
from verl_rfpp.experiments import report, runs


def _record(method, seed, rewards, kl=0.01, adv_std=1.0, rfpp=True):
    metrics = {report.REWARD: list(enumerate(rewards, 1)),
               report.ADV_STD: [(s, adv_std) for s in range(1, len(rewards) + 1)],
               report.KL_LOSS: [(s, kl) for s in range(1, len(rewards) + 1)]}
    if rfpp:
        metrics.update({tag: [(1, 1.0)] for tag in report.RFPP_METRICS})
    return {"method": {"key": method.key, "label": method.label, "estimator": method.estimator, "ours": method.ours},
            "seed": seed, "steps": len(rewards), "seconds": 100.0 + seed, "proof": "p", "metrics": metrics}


def test_summary_table_and_plots(tmp_path):
    ours, verl = runs.METHODS[0], runs.METHODS[1]
    records = [_record(ours, 0, [0.0] * 5 + [1.0] * 5), _record(ours, 1, [0.2] * 5 + [1.4] * 5),
               _record(verl, 0, [0.1] * 10, kl=0.5, adv_std=0.99, rfpp=False)]
    table = report.summarize(records)
    row = table[ours.label]
    assert row["reward_first"] == pytest.approx(0.1) and row["reward_last"] == pytest.approx(1.2)
    assert row["gain"] == pytest.approx([1.0, 1.2]) and row["reward_last_std"] == pytest.approx(0.28284271247)
    assert row["rfpp_metrics_in_tensorboard"] and not table[verl.label]["rfpp_metrics_in_tensorboard"]
    assert table[verl.label]["kl_last"] == pytest.approx(0.5) and table[verl.label]["adv_std"] == pytest.approx(0.99)
    report.write_report(tmp_path, records, steps=10)
    for name in ("reward.png", "kl.png", "adv_std.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    text = (tmp_path / "report.md").read_text()
    assert "| ours REINFORCE++-baseline | 0.100 ± 0.141 | 1.200 ± 0.283 | +1.00, +1.20 |" in text
    assert len(json.loads((tmp_path / "results.json").read_text())["runs"]) == 3


def test_proof_refuses_a_run_that_ran_the_other_estimator():
    ours, verl = runs.METHODS[0], runs.METHODS[1]
    ours_trace = ["reinforce_plus_plus_baseline pid=1 valid_tokens=64 raw_adv_std=0.5",
                  "metrics pid=1 adv_std=1 reinforce_plus_plus=verl_rfpp.adapter.registries "
                  "reinforce_plus_plus_baseline=verl_rfpp.adapter.registries"]
    verl_trace = ["metrics pid=1 adv_std=0.99 reinforce_plus_plus=verl.trainer.ppo.core_algos "
                  "reinforce_plus_plus_baseline=verl.trainer.ppo.core_algos"]
    assert runs.proof(ours, ours_trace, steps=1).startswith("1 verl_rfpp reinforce_plus_plus_baseline calls")
    assert runs.proof(verl, verl_trace, steps=1).startswith("no verl_rfpp estimator call")
    with pytest.raises(runs.CurvesError, match="0 verl_rfpp estimator calls"):
        runs.proof(ours, verl_trace, steps=1)
    with pytest.raises(runs.CurvesError, match="1 verl_rfpp estimator calls"):
        runs.proof(verl, ours_trace, steps=1)
    with pytest.raises(runs.CurvesError):  # our call, but verl's registry entry: half-excluded
        runs.proof(verl, [ours_trace[0], verl_trace[0]], steps=1)


def test_read_events_returns_what_a_summary_writer_wrote(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    for step, value in ((1, 0.5), (2, -1.25)):
        writer.add_scalar("rfpp/adv_std", value, step)
    writer.close()
    assert runs.read_events(tmp_path) == {"rfpp/adv_std": [(1, 0.5), (2, -1.25)]}


def test_unknown_method_is_refused_with_the_choices(tmp_path, capsys):
    assert cli.main(["curves", "--out", str(tmp_path), "--methods", "ours_baseline", "ppo"]) == 2
    out = capsys.readouterr().out
    assert "unknown method(s) ppo" in out and "verl_grpo" in out
    assert not (tmp_path / "runs").exists()
