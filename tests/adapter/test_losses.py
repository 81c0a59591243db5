"""Losses (docs/contract.md sections 3, 5): our policy loss through verl's real ppo_loss, and k2."""

from __future__ import annotations

import copy
import dataclasses
import functools
import math

import pytest
import torch
from support import reference
from tensordict import TensorDict

from verl_rfpp import losses, validation
from verl_rfpp.adapter.compose import compose_verl_config

pytestmark = pytest.mark.usefixtures("cached_composition")  # tests/conftest.py: the tier's cached composition

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


def _reference_loss(b, log_prob, eps_low=EPS, eps_high=EPS):
    """float64, token by token (docs/contract.md sections 5 and 3):
    response_mean(clip) + 0.01 * response_mean(k2)."""
    policy, k2 = _reference_terms(b, log_prob, eps_low, eps_high)
    return policy + KL_COEF * k2


def _reference_terms(b, log_prob, eps_low=EPS, eps_high=EPS):
    """The two terms of ``_reference_loss``: ``(response_mean(clip), response_mean(k2))``; ``log_prob``
    may require grad (the clip's value from ``reference.clipped_surrogate``, its gradient from ``rho``)."""
    rows, length = b["mask"].shape
    policy, k2 = [], []
    for i in range(rows):
        policy.append([]), k2.append([])
        for t in range(length):
            rho = torch.exp(log_prob[i, t] - b["old"][i, t])
            a = b["adv"][i, t]
            value = reference.clipped_surrogate(log_prob[i, t].detach(), b["old"][i, t], a, eps_low, eps_high)
            # where the clip binds (the reference took the clipped term) the token loss is a constant
            unclipped = -math.exp(float(log_prob[i, t].detach() - b["old"][i, t])) * float(a)
            policy[i].append(-rho * a if value == unclipped else torch.tensor(value, dtype=torch.float64))
            k2[i].append(reference.k2(log_prob[i, t], b["ref"][i, t]))
    mask = b["mask"].tolist()
    return reference.response_mean(policy, mask), reference.response_mean(k2, mask)


def _actor_config():
    """A fresh copy of verl's ``ActorConfig`` of the recipe (``ppo_loss`` writes into its
    ``global_batch_info``); composed once, Hydra composition costs about a second."""
    return copy.deepcopy(_composed_actor_config())


@functools.cache
def _composed_actor_config():
    from verl.utils.config import omega_conf_to_dataclass

    config = compose_verl_config(
        list(validation.RECIPES["reinforce_plus_plus_baseline"])
        + ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.actor.use_dynamic_bsz=False"]
    )
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    assert actor.loss_agg_mode == "seq-mean-token-mean" and actor.kl_loss_type == "k2"
    assert actor.kl_loss_coef == KL_COEF and actor.clip_ratio_low == EPS and actor.clip_ratio_high == EPS
    return actor


def _on(b, device):
    """The batch ``b`` with its tensors on ``device``."""
    return {key: (value.to(device) if torch.is_tensor(value) else value) for key, value in b.items()}


def _verl_inputs(b, log_prob, global_batch_size=True):
    """A TensorDict as verl's engine hands it to ppo_loss, with the model's no-padding output,
    on the batch's device; ``global_batch_size=False`` leaves verl's row count out."""
    import verl.utils.tensordict_utils as tu

    rows, length = b["mask"].shape
    prompt = b["prompt"]
    device = b["mask"].device
    attention = torch.cat([torch.ones(rows, prompt, dtype=torch.int64, device=device), b["attended"].long()], dim=1)
    data = TensorDict(
        {
            "prompts": torch.ones(rows, prompt, dtype=torch.int64, device=device),
            "responses": torch.ones(rows, length, dtype=torch.int64, device=device),
            "attention_mask": attention,
            "response_mask": b["mask"],
            "old_log_probs": b["old"],
            "advantages": b["adv"],
            "ref_log_prob": b["ref"],
        },
        batch_size=[rows],
    )
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(b["mask"].bool().sum()))
    if global_batch_size:
        tu.assign_non_tensor(data, global_batch_size=rows)
    pieces = []  # log-probs are shifted left by one: position p predicts token p + 1
    for i in range(rows):
        n = int(b["lengths"][i])
        zeros = functools.partial(torch.zeros, dtype=log_prob.dtype, device=log_prob.device)
        pieces += [zeros(prompt - 1), log_prob[i, :n], zeros(1)]
    return data, {"log_probs": torch.cat(pieces)}


def test_verl_ppo_loss_with_the_recipe_equals_spec(device):
    from verl.workers.utils.losses import ppo_loss

    b = _batch()
    theirs_lp = b["log_prob"].clone().to(device).requires_grad_(True)
    data, model_output = _verl_inputs(_on(b, device), theirs_lp)
    loss, metrics = ppo_loss(_actor_config(), model_output, data)
    loss.backward()

    ours_lp = b["log_prob"].clone().requires_grad_(True)
    expected = _reference_loss(b, ours_lp)
    expected.backward()

    assert abs(loss.item() - expected.item()) <= 1e-12 * max(1.0, abs(expected.item()))
    assert (theirs_lp.grad.cpu() - ours_lp.grad).abs().max().item() <= 1e-12
    assert metrics["kl_loss"].aggregate() > 0
    # both clip bounds bound somewhere in this batch
    valid = b["mask"].bool()
    ratio = torch.exp(b["log_prob"] - b["old"])
    assert ((ratio > 1 + EPS) & (b["adv"] > 0) & valid).any()
    assert ((ratio < 1 - EPS) & (b["adv"] < 0) & valid).any()
    assert metrics["actor/pg_clipfrac"].aggregate() > 0 and metrics["actor/pg_clipfrac_lower"].aggregate() > 0


# --- clip-higher: asymmetric bounds (docs/contract.md section 5.1, rule 6.2.12) --------------------

ASYMMETRIC = [(0.2, 0.28), (0.28, 0.2)]  # both orders: swapped bounds give other numbers


def _asymmetric_actor(eps_low, eps_high):
    return dataclasses.replace(_actor_config(), clip_ratio_low=eps_low, clip_ratio_high=eps_high)


def _bands_bind(b, eps_low, eps_high):
    """Tokens whose loss differs between (eps_low, eps_high) and the swapped bounds: a ratio
    between the two upper bounds with A > 0, and one between the two lower bounds with A < 0."""
    valid = b["mask"].bool()
    ratio = torch.exp(b["log_prob"] - b["old"])
    low, high = sorted((eps_low, eps_high))
    upper = (ratio > 1 + low) & (ratio < 1 + high) & (b["adv"] > 0) & valid
    lower = (ratio < 1 - low) & (ratio > 1 - high) & (b["adv"] < 0) & valid
    return bool(upper.any()) and bool(lower.any())


@pytest.mark.parametrize("eps_low,eps_high", ASYMMETRIC)
def test_clipped_surrogate_with_asymmetric_bounds_matches_reference(eps_low, eps_high, device):
    b = _batch(seed=7, rows=12, length=16)
    assert _bands_bind(b, eps_low, eps_high)
    on = _on(b, device)
    loss, diagnostics = losses.clipped_surrogate(on["old"], on["log_prob"], on["adv"], on["mask"], eps_low, eps_high)
    mask = b["mask"].bool()
    expected = torch.tensor([[reference.clipped_surrogate(lp, old, a, eps_low, eps_high) if ok else 0.0
                              for lp, old, a, ok in zip(*rows, strict=True)]
                             for rows in zip(b["log_prob"].tolist(), b["old"].tolist(), b["adv"].tolist(),
                                             mask.tolist(), strict=True)], dtype=torch.float64)
    assert (loss.cpu() - expected).abs().max().item() <= 1e-15
    ratio = torch.exp(b["log_prob"] - b["old"])
    upper = (ratio > 1 + eps_high) & (b["adv"] > 0) & mask
    lower = (ratio < 1 - eps_low) & (b["adv"] < 0) & mask
    count = int(mask.sum())
    assert round(diagnostics["pg_clipfrac"].item() * count) == int((upper | lower).sum())
    assert round(diagnostics["pg_clipfrac_lower"].item() * count) == int(lower.sum()) > 0


@pytest.mark.parametrize("eps_low,eps_high", ASYMMETRIC)
def test_policy_loss_with_asymmetric_bounds_matches_reference(eps_low, eps_high, device):
    from verl_rfpp.losses import rfpp_policy_loss

    b = _batch(seed=7, rows=12, length=16)
    on = _on(b, device)
    ours_lp = on["log_prob"].clone().requires_grad_(True)
    loss, _ = rfpp_policy_loss(on["old"], ours_lp, on["adv"], on["mask"], "seq-mean-token-mean",
                               _asymmetric_actor(eps_low, eps_high), None)
    loss.backward()
    ref_lp = b["log_prob"].clone().requires_grad_(True)
    expected, _ = _reference_terms(b, ref_lp, eps_low, eps_high)
    expected.backward()
    assert abs(loss.item() - expected.item()) <= 1e-12 * max(1.0, abs(expected.item()))
    assert (ours_lp.grad.cpu() - ref_lp.grad).abs().max().item() <= 1e-12


@pytest.mark.parametrize("eps_low,eps_high", ASYMMETRIC)
def test_verl_ppo_loss_with_asymmetric_bounds_matches_reference(eps_low, eps_high, device):
    from verl.workers.utils.losses import ppo_loss

    b = _batch(seed=7, rows=12, length=16)
    assert _bands_bind(b, eps_low, eps_high)
    theirs_lp = b["log_prob"].clone().to(device).requires_grad_(True)
    data, model_output = _verl_inputs(_on(b, device), theirs_lp)
    loss, _ = ppo_loss(_asymmetric_actor(eps_low, eps_high), model_output, data)
    loss.backward()
    ours_lp = b["log_prob"].clone().requires_grad_(True)
    expected = _reference_loss(b, ours_lp, eps_low, eps_high)
    expected.backward()
    assert abs(loss.item() - expected.item()) <= 1e-12 * max(1.0, abs(expected.item()))
    assert (theirs_lp.grad.cpu() - ours_lp.grad).abs().max().item() <= 1e-12


def test_ppo_kl_is_the_mean_drift_over_valid_tokens_only(device):
    """``ppo_kl = mean over valid tokens of (logp_old - logp)`` (docs/contract.md section 5.1's
    diagnostics): masked slots, interior holes and padding rows, add nothing to it (a mutant that
    gave them a log ratio of 1 survived the suite)."""
    b = _batch(seed=5, rows=8, length=12)
    b["mask"][-1] = 0.0  # a padding row
    on = _on(b, device)
    _, diagnostics = losses.clipped_surrogate(on["old"], on["log_prob"], on["adv"], on["mask"], EPS, EPS)
    drifts = [old - lp for row_old, row_lp, row_m in zip(b["old"].tolist(), b["log_prob"].tolist(),
                                                          b["mask"].tolist(), strict=True)
              for old, lp, ok in zip(row_old, row_lp, row_m, strict=True) if ok]
    assert abs(diagnostics["ppo_kl"].item() - sum(drifts) / len(drifts)) <= 1e-12


def test_bad_loss_inputs_are_refused_naming_the_argument():
    """The refusals name what is wrong: the ``old_log_prob`` whose shape is not the mask's, and a
    ``global_batch_size`` that is not a number of responses."""
    from verl_rfpp import RfppInputError

    b = _batch()
    with pytest.raises(RfppInputError, match="old_log_prob"):
        losses.clipped_surrogate(b["old"][:, :-1], b["log_prob"], b["adv"], b["mask"], EPS, EPS)
    with pytest.raises(RfppInputError, match=r"global_batch_size.*a number of responses > 0 \(or None\)"):
        losses.response_mean(b["adv"], b["mask"], global_batch_size="eight")


@pytest.mark.parametrize("garbage", [math.nan, math.inf, -math.inf, 1e30])
def test_masked_garbage_does_not_reach_our_policy_loss_or_its_gradient(garbage):
    from verl_rfpp.losses import rfpp_policy_loss

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
    from verl_rfpp.losses import rfpp_policy_loss

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


# --- fewer responses than data-parallel ranks (docs/contract.md section 5.2) --------------------


def _mini_batch(responses, rows, seed):
    """``rows`` rows of which ``responses`` (at seeded positions) have valid tokens; the others are
    verl v1's padding rows (one attended EOS response token, mask 0). Ratios stay inside the clip
    range, so every valid token has a policy gradient."""
    b = _batch(seed=seed, rows=rows)
    b["log_prob"] = b["old"] + 0.1 * (b["log_prob"] - b["old"])
    order = torch.randperm(rows, generator=torch.Generator().manual_seed(seed))
    for i in order[responses:].tolist():
        b["mask"][i] = 0.0
        b["attended"][i] = False
        b["attended"][i, 0] = True
        b["lengths"][i] = 1
        b["adv"][i] = 0.0
    return b


def _rows_of(b, rows):
    return {key: (value[rows] if torch.is_tensor(value) else value) for key, value in b.items()}


def _per_rank_ppo_loss(b, dp, shards, actor):
    """Each rank's ``ppo_loss`` on its shard, with the global batch info our engine hands it
    (``global_batch_size`` = the mini-batch's responses over all ranks, floored at 1), then the
    average over ranks that DDP/FSDP applies to the gradients. Returns ``(loss, grad, pg, kl)``."""
    import verl.utils.tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    responses = max(int((b["mask"].sum(dim=1) > 0).sum()), 1)
    log_prob = b["log_prob"].clone().requires_grad_(True)
    total, pg, kl = 0.0, 0.0, 0.0
    for shard in shards:
        if len(shard) == 0:
            continue  # a rank without rows adds nothing to the averaged gradient
        part = _rows_of(b, shard)
        data, model_output = _verl_inputs(part, log_prob[shard])
        tu.assign_non_tensor(data, global_batch_size=responses, dp_size=dp)
        loss, metrics = ppo_loss(actor, model_output, data)
        total = total + loss / dp
        pg += metrics["actor/pg_loss"].aggregate() / dp
        kl += metrics["kl_loss"].aggregate() / dp if "kl_loss" in metrics else 0.0
    total.backward()
    return total, log_prob.grad, pg, kl


@pytest.mark.parametrize("padding", [False, True], ids=["no-padding-rows", "padding-rows"])
@pytest.mark.parametrize("dp,responses", [(dp, n) for dp in (1, 2, 4, 8) for n in range(1, 2 * dp + 1)])
def test_fewer_responses_than_ranks_both_terms_use_the_contract_divisor(dp, responses, padding, device):
    """N responses over dp ranks, through verl's real ``ppo_loss`` per rank: the averaged loss,
    both logged terms and the gradient of the policy term and of the whole loss are the float64
    reference's response means over the whole mini-batch. With N < dp each rank divides both
    terms by N / dp < 1 (verl's k2 ``agg_loss`` does; the policy term once divided by 1)."""
    rows = dp * (responses // dp + 1) if padding else responses
    b = _mini_batch(responses, rows, seed=100 * dp + 10 * responses + padding)
    shards = [part.tolist() for part in torch.arange(rows).tensor_split(dp)]
    actor = _actor_config()
    loss, grad, pg, kl = _per_rank_ppo_loss(_on(b, device), dp, shards, actor)
    policy_only = dataclasses.replace(actor, use_kl_loss=False)
    _, policy_grad, _, _ = _per_rank_ppo_loss(_on(b, device), dp, shards, policy_only)
    grad, policy_grad = grad.cpu(), policy_grad.cpu()

    log_prob = b["log_prob"].clone().requires_grad_(True)
    policy, k2 = _reference_terms(b, log_prob)
    expected = policy + KL_COEF * k2
    (expected_policy_grad,) = torch.autograd.grad(policy, log_prob, retain_graph=True)
    (expected_grad,) = torch.autograd.grad(expected, log_prob)
    for value, reference_value in ((loss.item(), expected.item()), (pg, policy.item()), (kl, k2.item())):
        assert abs(value - reference_value) <= 1e-12 * max(1.0, abs(reference_value)), (value, reference_value)
    assert (policy_grad - expected_policy_grad).abs().max().item() <= 1e-12
    assert (grad - expected_grad).abs().max().item() <= 1e-12
    assert expected_policy_grad.abs().max().item() > 1e-3


def test_response_mean_floors_the_global_count_not_the_share_of_a_rank():
    """2 responses over 4 ranks: each rank divides by 2 / 4, as verl's agg_loss does for k2; an
    empty mini-batch (floored at 1) by 1 / 4 of nothing, a zero loss."""
    loss = torch.tensor([[1.0, 3.0, 100.0], [5.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert losses.response_mean(loss, mask, global_batch_size=2, dp_size=4).item() == 2.0 / 0.5
    assert losses.response_mean(loss, torch.zeros_like(mask), global_batch_size=1, dp_size=4).item() == 0.0


@pytest.mark.parametrize("dp_size", [0, -1, 1.5, math.nan, math.inf, "2", None, True])
def test_response_mean_refuses_a_dp_size_that_is_not_a_rank_count(dp_size):
    from verl_rfpp.errors import RfppInputError

    loss, mask = torch.ones(2, 3), torch.ones(2, 3)
    with pytest.raises(RfppInputError, match="dp_size"):
        losses.response_mean(loss, mask, global_batch_size=2, dp_size=dp_size)
    with pytest.raises(RfppInputError, match="dp_size"):
        losses.response_mean(loss, mask, dp_size=dp_size)


def test_response_mean_over_ranks_needs_the_global_count():
    from verl_rfpp.errors import RfppInputError

    with pytest.raises(RfppInputError, match="without global_batch_size"):
        losses.response_mean(torch.ones(2, 3), torch.ones(2, 3), dp_size=2)


@pytest.mark.parametrize("dp_size", [0, -2])
def test_policy_loss_refuses_dp_size_zero_from_the_batch_info(dp_size):
    """``global_batch_info['dp_size'] = 0`` is refused, not read as one rank."""
    from verl_rfpp.errors import RfppInputError
    from verl_rfpp.losses import rfpp_policy_loss

    actor = _actor_config()
    actor.global_batch_info.update(dp_size=dp_size, global_batch_size=4)
    b = _batch()
    with pytest.raises(RfppInputError, match="dp_size"):
        rfpp_policy_loss(b["old"], b["log_prob"], b["adv"], b["mask"], "seq-mean-token-mean", actor, None)


# --- the engine's response count (docs/contract.md sections 5.2, 8.3), no process ---------------


def test_response_count_reads_padded_and_nested_masks():
    padded = torch.tensor([[1, 1, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0]])
    nested = torch.nested.as_nested_tensor(
        [torch.tensor([1, 1]), torch.tensor([0]), torch.tensor([0, 0, 1]), torch.tensor([], dtype=torch.int64)],
        layout=torch.jagged)
    assert int(losses.responses_with_valid_tokens(padded)) == 2
    assert int(losses.responses_with_valid_tokens(nested)) == 2
    assert int(losses.responses_with_valid_tokens(padded.bool())) == 2


@pytest.mark.parametrize("verl_rows", [True, False], ids=["verl-row-count", "no-global-batch-size"])
@pytest.mark.parametrize("responses", [3, 0])
def test_engine_divides_the_rfpp_loss_by_responses_not_padding_rows(responses, verl_rows, monkeypatch):
    """``BaseEngine.train_batch`` as the plugin wraps it, on a mini-batch of 8 rows of which the
    all-masked ones are padding: the ``rfpp`` loss gets ``global_batch_size = N`` (floored at 1),
    whether or not verl set its row count; verl's ``vanilla`` loss keeps verl's value."""
    import verl.utils.device
    import verl.utils.tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    from verl_rfpp.adapter.engine import _counting_responses
    from verl_rfpp.cpu.platform import PlatformCPU

    monkeypatch.setattr(verl.utils.device, "get_device_id", PlatformCPU().current_device)
    b = _mini_batch(responses, 8, seed=4)
    data, _ = _verl_inputs(b, b["log_prob"], global_batch_size=verl_rows)
    seen = []
    train_batch = _counting_responses(
        lambda self, data, loss_function: seen.append(tu.get_non_tensor_data(data, "global_batch_size", None)))
    vanilla = dataclasses.replace(_actor_config(), policy_loss=dataclasses.replace(
        _actor_config().policy_loss, loss_mode="vanilla"))
    train_batch(None, data, functools.partial(ppo_loss, config=vanilla))
    train_batch(None, data, functools.partial(ppo_loss, config=_actor_config()))
    assert seen == [8 if verl_rows else None, max(responses, 1)]


def test_rfpp_policy_loss_through_verl_ppo_loss_on_an_all_masked_micro_batch_is_zero():
    """verl's real ppo_loss without global_batch_size (a direct call) and no valid token."""
    from verl.workers.utils.losses import ppo_loss

    b = _batch(seed=5)
    b["mask"] = torch.zeros_like(b["mask"])
    log_prob = b["log_prob"].clone().requires_grad_(True)
    data, model_output = _verl_inputs(b, log_prob)
    import verl.utils.tensordict_utils as tu

    tu.assign_non_tensor(data, global_batch_size=None, batch_num_tokens=None)
    # the recipe's k2 term too: verl's agg_loss would divide 0 by 0 without a global_batch_size
    actor = _actor_config()
    assert actor.policy_loss.loss_mode == "rfpp" and actor.use_kl_loss
    loss, metrics = ppo_loss(actor, model_output, data)
    loss.backward()
    assert torch.isfinite(loss) and loss.item() == 0.0 and metrics["kl_loss"].aggregate() == 0.0
    assert torch.equal(log_prob.grad, torch.zeros_like(log_prob))
