"""``verl-rfpp curves``: the report's numbers, the proof of which estimator ran, tensorboard
read-back, and (e2e) a short real run of ours against verl's built-in with the plugin excluded."""

from __future__ import annotations

import json

import pytest

from verl_rfpp import cli
from verl_rfpp.curves import report, runs


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
    report.write(tmp_path, records, steps=10)
    for name in ("reward.png", "kl.png", "adv_std.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    text = (tmp_path / "report.md").read_text()
    assert "| ours REINFORCE++-baseline | 0.100 ± 0.141 | 1.200 ± 0.283 | +1.00, +1.20 |" in text
    assert len(json.loads((tmp_path / "results.json").read_text())["runs"]) == 3


def test_proof_refuses_a_run_that_ran_the_other_estimator():
    ours, verl = runs.METHODS[0], runs.METHODS[1]
    ours_trace = ["reinforce_plus_plus_baseline pid=1 valid_tokens=64 raw_adv_std=0.5",
                  "metrics pid=1 adv_std=1 reinforce_plus_plus=verl_rfpp.plugin "
                  "reinforce_plus_plus_baseline=verl_rfpp.plugin"]
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


@pytest.mark.e2e
def test_short_curves_run_of_verls_builtin_with_the_plugin_excluded(tmp_path, capsys):
    """One 2-step run of verl's built-in REINFORCE++-baseline through ``verl-rfpp curves`` (ours in
    verl's trainer, with tensorboard, is covered by tests/test_end_to_end.py)."""
    code = cli.main(["curves", "--out", str(tmp_path), "--steps", "2", "--seeds", "1", "--methods", "verl_baseline"])
    assert code == 0, capsys.readouterr().out[-3000:]
    (run,) = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert run["proof"] == "no verl_rfpp estimator call; registry -> verl.trainer.ppo.core_algos"
    metrics = run["metrics"]  # read back from the tensorboard event files
    assert [step for step, _ in metrics[report.REWARD]] == [1, 2]
    assert not any(tag.startswith("rfpp/") for tag in metrics)
    # verl divides by the unbiased std plus an epsilon: the std of its advantages is sqrt((N-1)/N) < 1
    # over N valid tokens (ours gives exactly 1; checked in tests/test_end_to_end.py via rfpp/adv_std)
    lengths = dict(metrics["response_length/mean"])
    for step, value in metrics[report.ADV_STD]:
        tokens = round(lengths[step] * 16)  # 16 responses per step
        assert value == pytest.approx(((tokens - 1) / tokens) ** 0.5, abs=1e-5)
    for name in ("reward.png", "kl.png", "adv_std.png", "report.md"):
        assert (tmp_path / name).exists()


def test_unknown_method_is_refused_with_the_choices(tmp_path, capsys):
    assert cli.main(["curves", "--out", str(tmp_path), "--methods", "ours_baseline", "ppo"]) == 2
    out = capsys.readouterr().out
    assert "unknown method(s) ppo" in out and "verl_grpo" in out
    assert not (tmp_path / "runs").exists()
