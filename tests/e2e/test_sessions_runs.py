"""REINFORCE++-baseline over agent sessions with several outputs (docs/contract.md section 3.7) in
verl's real v1 trainer on the CPU, an agent loop whose sessions return one or two outputs (the
numbers on plain tensors and verl's ``compute_advantage_for_multi_trajectories`` with the plugin's
hook: tests/adapter/test_sessions.py)."""

from __future__ import annotations

import pytest
import torch
from support import reference


def relative_error(actual, expected):
    scale = max(expected.abs().max().item(), 1e-30)
    return (actual.to(torch.float64) - expected).abs().max().item() / scale


# verl's real v1 trainer on the CPU, an agent loop whose even sessions return two outputs: the
# session fixture ``v1_two_output_run`` (tests/support/trainer_runs.py; its 2 ranks are checked in
# tests/e2e/test_end_to_end.py), every training step's advantage step as verl's driver computed it.


@pytest.mark.e2e
def test_v1_trainer_stores_each_output_as_a_row_with_the_final_reward_copied(v1_two_output_run):
    assert len(v1_two_output_run.steps) == 2  # one advantage step per training step, in the driver
    for step in v1_two_output_run.steps:
        assert step["adv_estimator"] == "reinforce_plus_plus_baseline"
        real = [key for key in step["keys"] if not key.startswith("pad")]
        outputs: dict = {}
        for key in real:
            session, _, index = key.rpartition("_")
            outputs.setdefault(session, []).append(int(index))
        assert len(outputs) == 16  # 4 prompts x rollout.n = 4 sessions
        assert {session: sorted(indices) for session, indices in outputs.items()} == {
            session: [0, 1] if int(session.rsplit("_", 1)[1]) % 2 == 0 else [0] for session in outputs}
        assert len(real) == 24
        rewards = step["token_level_rewards"].double().sum(dim=1)
        row = {key: i for i, key in enumerate(step["keys"])}
        for session, indices in outputs.items():
            if len(indices) == 2:  # verl wrote the final output's reward onto the first output
                assert rewards[row[f"{session}_0"]] == rewards[row[f"{session}_1"]]


@pytest.mark.e2e
def test_v1_trainer_advantages_count_each_session_once(v1_two_output_run):
    from verl_rfpp.cpu import trace

    lines = trace.lines_of(v1_two_output_run.result.trace, "reinforce_plus_plus_baseline")
    assert len(lines) == len(v1_two_output_run.steps) == 2  # our estimator ran, once per step
    apart = []
    for step, line in zip(v1_two_output_run.steps, lines, strict=True):
        rewards, mask = step["token_level_rewards"], step["response_mask"]
        sessions = [key.rsplit("_", 1)[0] for key in step["keys"]]  # read here from verl's keys, not by the plugin
        expected, expected_raw = reference.session_baseline(rewards, mask, step["uid"], sessions)
        assert relative_error(step["advantages"], expected) <= 1e-6
        assert relative_error(step["returns"], expected_raw) <= 1e-6
        per_output, _ = reference.reinforce_plus_plus_baseline(rewards, mask, step["uid"])
        apart.append(relative_error(per_output, expected))
        assert int(line["valid_tokens"]) == int(mask.sum())  # over every output's tokens
    assert max(apart) > 1e-3  # the run's batches tell the two semantics apart
