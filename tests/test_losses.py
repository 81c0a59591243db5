"""Losses (docs/contract.md sections 3, 5): our policy loss through verl's real ppo_loss, and k2."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

import reference
from verl_rfpp import losses, validation
from verl_rfpp.plugin.compose import compose_verl_config

EPS = 0.2
KL_COEF = 0.01


def _batch(seed=0, rows=6, length=10, prompt=3):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, length + 1, (rows,), generator=g)
    attended = (torch.arange(length)[None, :] < lengths[:, None])
    mask = attended.float()
    mask[0, 1] = 0.0  # an interior hole
    old = -torch.rand(rows, length, generator=g, dtype=torch.float64) - 0.5
    # ratios spread over [e^-0.6, e^0.6] so both clip bounds bind
    log_ratio = 1.2 * torch.rand(rows, length, generator=g, dtype=torch.float64) - 0.6
    log_prob = old + log_ratio
    ref = old + 0.3 * torch.randn(rows, length, generator=g, dtype=torch.float64)
    advantages = torch.randn(rows, length, generator=g, dtype=torch.float64) * mask
    return dict(mask=mask, attended=attended, old=old, log_prob=log_prob, ref=ref, adv=advantages,
                lengths=lengths, prompt=prompt)


def _reference_loss(b, log_prob):
    """float64, token by token (docs/contract.md sections 5 and 3):
    response_mean(clip) + 0.01 * response_mean(k2)."""
    rows, length = b["mask"].shape
    policy, k2 = [], []
    for i in range(rows):
        policy.append([]), k2.append([])
        for t in range(length):
            rho = torch.exp(log_prob[i, t] - b["old"][i, t])
            a = b["adv"][i, t]
            clipped = torch.clamp(rho, 1 - EPS, 1 + EPS)
            policy[i].append(torch.maximum(-rho * a, -clipped * a))
            k2[i].append(reference.k2(log_prob[i, t], b["ref"][i, t]))
    mask = b["mask"].tolist()
    return reference.response_mean(policy, mask) + KL_COEF * reference.response_mean(k2, mask)


def _actor_config():
    from verl.utils.config import omega_conf_to_dataclass

    config = compose_verl_config(
        list(validation.RECIPES["reinforce_plus_plus_baseline"])
        + ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.actor.use_dynamic_bsz=False"]
    )
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    assert actor.loss_agg_mode == "seq-mean-token-mean" and actor.kl_loss_type == "k2"
    assert actor.kl_loss_coef == KL_COEF and actor.clip_ratio_low == EPS and actor.clip_ratio_high == EPS
    return actor


def _verl_inputs(b, log_prob):
    """A TensorDict as verl's engine hands it to ppo_loss, with the model's no-padding output."""
    import verl.utils.tensordict_utils as tu

    rows, length = b["mask"].shape
    prompt = b["prompt"]
    attention = torch.cat([torch.ones(rows, prompt, dtype=torch.int64), b["attended"].long()], dim=1)
    data = TensorDict(
        {
            "prompts": torch.ones(rows, prompt, dtype=torch.int64),
            "responses": torch.ones(rows, length, dtype=torch.int64),
            "attention_mask": attention,
            "response_mask": b["mask"],
            "old_log_probs": b["old"],
            "advantages": b["adv"],
            "ref_log_prob": b["ref"],
        },
        batch_size=[rows],
    )
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(b["mask"].sum()), global_batch_size=rows)
    pieces = []  # log-probs are shifted left by one: position p predicts token p + 1
    for i in range(rows):
        n = int(b["lengths"][i])
        pieces += [torch.zeros(prompt - 1, dtype=log_prob.dtype), log_prob[i, :n], torch.zeros(1, dtype=log_prob.dtype)]
    return data, {"log_probs": torch.cat(pieces)}


def test_verl_ppo_loss_with_the_recipe_equals_spec():
    from verl.workers.utils.losses import ppo_loss

    b = _batch()
    theirs_lp = b["log_prob"].clone().requires_grad_(True)
    data, model_output = _verl_inputs(b, theirs_lp)
    loss, metrics = ppo_loss(_actor_config(), model_output, data)
    loss.backward()

    ours_lp = b["log_prob"].clone().requires_grad_(True)
    expected = _reference_loss(b, ours_lp)
    expected.backward()

    assert abs(loss.item() - expected.item()) <= 1e-12 * max(1.0, abs(expected.item()))
    assert (theirs_lp.grad - ours_lp.grad).abs().max().item() <= 1e-12
    assert metrics["kl_loss"].aggregate() > 0
    # both clip bounds bound somewhere in this batch
    valid = b["mask"].bool()
    ratio = torch.exp(b["log_prob"] - b["old"])
    assert ((ratio > 1 + EPS) & (b["adv"] > 0) & valid).any()
    assert ((ratio < 1 - EPS) & (b["adv"] < 0) & valid).any()
    assert metrics["actor/pg_clipfrac"].aggregate() > 0 and metrics["actor/pg_clipfrac_lower"].aggregate() > 0


@pytest.mark.parametrize("garbage", [math.nan, math.inf, -math.inf, 1e30])
def test_masked_garbage_does_not_reach_our_policy_loss_or_its_gradient(garbage):
    from verl_rfpp.plugin import rfpp_policy_loss

    actor = _actor_config()
    b = _batch(seed=3)
    masked = ~b["mask"].bool()

    def run(dirty):
        lp = b["log_prob"].clone()
        old, adv = b["old"].clone(), b["adv"].clone()
        if dirty:
            lp[masked], old[masked], adv[masked] = garbage, garbage, garbage
        lp.requires_grad_(True)
        loss, metrics = rfpp_policy_loss(old, lp, adv, b["mask"], "seq-mean-token-mean", actor, None)
        loss.backward()
        return loss, lp.grad, metrics

    clean_loss, clean_grad, clean_metrics = run(False)
    loss, grad, metrics = run(True)
    assert torch.equal(loss, clean_loss) and torch.isfinite(loss)
    assert torch.equal(grad, clean_grad)
    assert metrics == clean_metrics


def test_policy_loss_refuses_token_mean():
    from verl_rfpp.errors import RfppError
    from verl_rfpp.plugin import rfpp_policy_loss

    b = _batch()
    with pytest.raises(RfppError, match="seq-mean-token-mean"):
        rfpp_policy_loss(b["old"], b["log_prob"], b["adv"], b["mask"], "token-mean", _actor_config(), None)


def test_response_mean_ignores_empty_responses_and_uses_global_batch_size():
    loss = torch.tensor([[1.0, 3.0, 100.0], [5.0, 0.0, 0.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert losses.response_mean(loss, mask).item() == (2.0 + 5.0) / 2
    assert losses.response_mean(loss, mask, global_batch_size=8, dp_size=2).item() == (2.0 + 5.0) / 4


@pytest.mark.parametrize("distance", [0.1, 1.0, 3.0])
def test_k2_expected_gradient_is_the_reverse_kl_gradient(distance):
    g = torch.Generator().manual_seed(int(distance * 10))
    logits = (distance * torch.randn(5, generator=g, dtype=torch.float64)).requires_grad_(True)
    ref_log = torch.log_softmax(torch.randn(5, generator=g, dtype=torch.float64), dim=0)
    log_pi = torch.log_softmax(logits, dim=0)
    reverse_kl = (log_pi.exp() * (log_pi - ref_log)).sum()
    (reverse_grad,) = torch.autograd.grad(reverse_kl, logits, retain_graph=True)
    # expectation over samples x ~ pi of the gradient of k2(x) used as a loss (exact enumeration)
    weights = log_pi.exp().detach()
    expected_k2 = (weights * losses.k2_penalty(log_pi, ref_log)).sum()
    (k2_grad,) = torch.autograd.grad(expected_k2, logits)
    assert (k2_grad - reverse_grad).abs().max().item() <= 1e-12
    assert reverse_grad.abs().max().item() > 1e-3
