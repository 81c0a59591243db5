"""REINFORCE++-baseline over agent sessions with several outputs (docs/contract.md section 3.7):
the numbers against the float64 reference on plain tensors, verl's real v1
``compute_advantage_for_multi_trajectories`` with the plugin's hook (verl's real v1 trainer on the
CPU with an agent loop whose sessions return one or two outputs: tests/e2e/test_sessions_runs.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support import reference

from verl_rfpp import RfppInputError, reinforce_plus_plus_baseline
from verl_rfpp.estimators import compute_reinforce_plus_plus_baseline_advantage

TOLERANCE = {torch.float32: 1e-6, torch.float64: 1e-12}


def relative_error(actual, expected):
    scale = max(expected.abs().max().item(), 1e-30)
    return (actual.to(torch.float64) - expected).abs().max().item() / scale


def session_batch(seed, *, prompts=4, sessions=4, max_outputs=3, length=16, copied=True, padding_rows=3,
                  dtype=torch.float32):
    """A v1 step batch as verl 0.9.1 builds it: per prompt ``sessions`` sessions of 1..max_outputs
    outputs, keyed ``{uid}_{session_id}_{index}``; the session's final reward on the last valid
    token of every output (``copied``; else each output its own reward, as a colocated reward
    model scores them), rows shuffled (verl's balancing), padding rows ``pad_{k}_0`` at the end."""
    g = torch.Generator().manual_seed(seed)
    keys, rewards_of = [], []
    for p in range(prompts):
        for s in range(sessions):
            outputs = int(torch.randint(1, max_outputs + 1, (1,), generator=g))
            final = float(torch.randn(1, generator=g, dtype=torch.float64))
            for o in range(outputs):
                keys.append(f"uid{p}_{s}_{o}")
                rewards_of.append(final if copied else float(torch.randn(1, generator=g, dtype=torch.float64)))
    order = torch.randperm(len(keys), generator=g).tolist()
    keys = [keys[i] for i in order] + [f"pad_{k}_0" for k in range(padding_rows)]
    outcome = [rewards_of[i] for i in order] + [0.0] * padding_rows
    batch = len(keys)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    lengths[batch - padding_rows:] = 0
    mask = (torch.arange(length)[None, :] < lengths[:, None]).float()
    hole = (torch.rand(batch, length, generator=g) < 0.15) & (torch.arange(length)[None, :] < lengths[:, None] - 1)
    mask[hole] = 0.0
    rewards = torch.zeros(batch, length, dtype=torch.float64)
    for i in range(batch):
        if lengths[i] > 0:
            rewards[i, lengths[i] - 1] = outcome[i]
    uids = np.array([key.rsplit("_", 2)[0] for key in keys], dtype=object)
    labels = np.array([key.rsplit("_", 1)[0] for key in keys], dtype=object)
    return rewards.to(dtype), mask, uids, labels, keys


@pytest.mark.usefixtures("passes_implementation")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("copied", [True, False], ids=["copied-reward", "own-reward"])
@pytest.mark.parametrize("seed", range(6))
def test_session_baseline_matches_reference(seed, copied, dtype):
    rewards, mask, uids, labels, _ = session_batch(seed, copied=copied, dtype=dtype)
    result = reinforce_plus_plus_baseline(rewards, mask, uids, session=labels)
    expected_advantages, expected_raw = reference.session_baseline(rewards, mask, list(uids), list(labels))
    assert result.advantages.dtype == dtype and result.returns.dtype == dtype
    assert relative_error(result.returns, expected_raw) <= TOLERANCE[dtype]
    assert relative_error(result.advantages, expected_advantages) <= TOLERANCE[dtype]
    # the batch tells the two semantics apart: counting each output as a response is another number
    per_output, _ = reference.reinforce_plus_plus_baseline(rewards, mask, list(uids))
    assert relative_error(per_output, expected_advantages) > 1e-3


def test_each_session_counts_once_in_its_group_mean_not_once_per_output():
    """Prompt g: session A has 3 outputs with reward 1 (copied), session B one output with reward 0.
    Baseline over sessions: b = (1 + 0) / 2 = 0.5, so C = +0.5 on A's outputs and -0.5 on B's; a
    mean over rows would give b = 3/4."""
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    mask = torch.tensor([[1, 0], [1, 1], [1, 0], [1, 1]])
    uids = ["g", "g", "g", "g"]
    labels = ["g_0", "g_0", "g_0", "g_1"]
    _, raw = compute_reinforce_plus_plus_baseline_advantage(rewards, mask, index=uids, session=labels)
    assert raw.tolist() == [[0.5, 0.0], [0.5, 0.5], [0.5, 0.0], [-0.5, -0.5]]
    _, per_output = compute_reinforce_plus_plus_baseline_advantage(rewards, mask, index=uids)
    assert per_output[3, 0].item() == -0.75


def test_one_output_per_session_is_section_3_2_to_the_bit():
    rewards, mask, uids, _, _ = session_batch(3, max_outputs=1, dtype=torch.float64)
    labels = np.array([f"s{i}" for i in range(len(uids))], dtype=object)
    with_sessions = reinforce_plus_plus_baseline(rewards, mask, uids, session=labels)
    without = reinforce_plus_plus_baseline(rewards, mask, uids)
    assert torch.equal(with_sessions.advantages, without.advantages)
    assert torch.equal(with_sessions.returns, without.returns)


def test_padding_rows_need_no_session_label_and_stay_zero():
    rewards, mask, uids, labels, _ = session_batch(5, padding_rows=2, dtype=torch.float64)
    labels = labels.copy()
    labels[-2:] = None
    result = reinforce_plus_plus_baseline(rewards, mask, uids, session=labels)
    assert torch.equal(result.advantages[-2:], torch.zeros_like(result.advantages[-2:]))
    expected, _ = reference.session_baseline(rewards, mask, list(uids), [str(x) for x in labels])
    assert relative_error(result.advantages, expected) <= 1e-12


@pytest.mark.parametrize("case,match", [
    ("spans-prompts", r"session 'a_0' spans rows of several prompts \(uids 'a', 'b'\)"),
    ("missing-label", r"session has no label \(None or NaN\) for row 1, a response"),
    ("wrong-length", r"session must hold one label per row \(3 rows\), got shape \(2,\)"),
    ("a-string", r"session = str 'a_0': expected one session label per row"),
    ("unhashable", r"session holds unhashable labels"),
])
def test_bad_session_labels_are_refused_naming_the_cause(case, match):
    rewards, mask, uids = torch.ones(3, 2), torch.ones(3, 2), ["a", "a", "b"]
    labels = {"spans-prompts": ["a_0", "a_0", "a_0"], "missing-label": ["a_0", None, "b_0"],
              "wrong-length": ["a_0", "a_1"], "a-string": "a_0",
              "unhashable": [["a", 0], ["a", 1], ["b", 0]]}[case]
    with pytest.raises(RfppInputError, match=match):
        reinforce_plus_plus_baseline(rewards, mask, uids, session=labels)


# verl's real v1 compute_advantage_for_multi_trajectories, with the plugin's hook

def _data_proto(rewards, mask, uids):
    from verl.protocol import DataProto

    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": np.array(uids, dtype=object)})


def _v1_compute(data, keys, estimator):
    import verl  # noqa: F401  (loads the plugin)
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import trainer_base

    return trainer_base.compute_advantage_for_multi_trajectories(
        data, batch_keys=keys, adv_estimator=estimator, gamma=1.0, lam=1.0, num_repeat=4,
        norm_adv_by_std_in_grpo=True, config=OmegaConf.create({"gamma": 1.0, "adv_estimator": estimator}))


def test_verl_v1_advantage_step_counts_each_session_once():
    """verl's own v1 advantage step (the function trainer_base calls, keys and all) gives the
    baseline the sessions read from verl's keys: the reference over sessions, not over outputs."""
    rewards, mask, uids, labels, keys = session_batch(7, dtype=torch.float32)
    data = _v1_compute(_data_proto(rewards, mask, uids), keys, "reinforce_plus_plus_baseline")
    expected, expected_raw = reference.session_baseline(rewards, mask, list(uids), list(labels))
    assert relative_error(data.batch["advantages"], expected) <= 1e-6
    assert relative_error(data.batch["returns"], expected_raw) <= 1e-6
    from verl_rfpp.adapter import sessions

    assert sessions.current(len(keys)) is None  # held only during the step's estimator call


def test_grpo_through_the_hooked_v1_step_is_verls_own():
    from verl.trainer.ppo.v1 import utils as v1_utils

    rewards, mask, uids, _, keys = session_batch(8, dtype=torch.float32)
    ours = _v1_compute(_data_proto(rewards, mask, uids), keys, "grpo")
    from omegaconf import OmegaConf

    verls = v1_utils.compute_advantage_for_multi_trajectories(
        _data_proto(rewards, mask, uids), batch_keys=keys, adv_estimator="grpo", gamma=1.0, lam=1.0, num_repeat=4,
        norm_adv_by_std_in_grpo=True, config=OmegaConf.create({"gamma": 1.0, "adv_estimator": "grpo"}))
    assert torch.equal(ours.batch["advantages"], verls.batch["advantages"])


def test_a_key_not_in_verls_format_is_refused_naming_it():
    from verl_rfpp.adapter.sessions import SessionKeyError

    rewards, mask, uids, _, keys = session_batch(9, dtype=torch.float32)
    keys = list(keys)
    keys[2] = f"{uids[2]}-0-0"
    with pytest.raises(SessionKeyError, match=rf"batch key '{uids[2]}-0-0' of row 2 .* is not"):
        _v1_compute(_data_proto(rewards, mask, uids), keys, "reinforce_plus_plus_baseline")
