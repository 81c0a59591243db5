"""verl's real ``ppo_loss`` for an ``rfpp`` actor reads no masked slot (docs/contract.md section
1.3): whatever ``ref_log_prob``, ``old_log_probs``, ``advantages`` or ``rollout_is_weights`` hold
where ``response_mask`` is 0, the whole actor loss (our policy loss + verl's k2 term) and its
gradient are the float64 reference's. Before the plugin wrapped ``ppo_loss``, ``-inf`` in a masked
``ref_log_prob`` made both NaN (verl's ``agg_loss`` multiplies the k2 values by the mask)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_losses import _actor_config, _batch, _on, _reference_loss, _verl_inputs

GARBAGE = [math.nan, math.inf, -math.inf, 1e30, -1e30]
FIELDS = {"ref_log_prob": "ref", "old_log_probs": "old", "advantages": "adv"}


def _verl_loss(b, dtype=torch.float64, config=None, device="cpu"):
    from verl.workers.utils.losses import ppo_loss

    cast = {key: (value.to(dtype) if torch.is_tensor(value) and value.is_floating_point() else value)
            for key, value in _on(b, device).items()}
    log_prob = cast["log_prob"].clone().requires_grad_(True)
    data, model_output = _verl_inputs(cast, log_prob)
    loss, metrics = ppo_loss(config or _actor_config(), model_output, data)
    loss.backward()
    return loss, log_prob.grad, metrics


def _reference(b):
    log_prob = b["log_prob"].clone().requires_grad_(True)
    expected = _reference_loss(b, log_prob)
    expected.backward()
    return expected, log_prob.grad


def _dirty(b, field, garbage, positions):
    dirty = dict(b)
    dirty[field] = b[field].clone()
    for i, t in positions:
        assert b["mask"][i, t] == 0
        dirty[field][i, t] = garbage
    return dirty


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("garbage", GARBAGE)
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_masked_garbage_in_ppo_loss_inputs_equals_the_reference(field, garbage, dtype, device):
    b = _batch(seed=3)
    holes = [(0, 1)]  # the batch's interior hole
    padding = [(i, int(b["lengths"][i])) for i in range(len(b["lengths"])) if b["lengths"][i] < b["mask"].shape[1]]
    assert padding
    dirty = _dirty(b, FIELDS[field], garbage, holes + padding)
    loss, grad, metrics = _verl_loss(dirty, dtype, device=device)
    expected, expected_grad = _reference(b)
    tolerance = 1e-12 if dtype == torch.float64 else 2e-6
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    assert abs(loss.item() - expected.item()) <= tolerance * max(1.0, abs(expected.item()))
    assert (grad.cpu().double() - expected_grad).abs().max().item() <= tolerance
    assert math.isfinite(metrics["kl_loss"].aggregate())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), data=st.data())
def test_any_masked_garbage_anywhere_changes_nothing(seed, data):
    """Random batches, garbage drawn per masked slot and field: the loss and the gradient are the
    reference's computed from the clean batch."""
    b = _batch(seed=seed)
    masked = (~b["mask"].bool()).nonzero().tolist()
    dirty = dict(b)
    for key in FIELDS.values():
        dirty[key] = b[key].clone()
        for i, t in masked:
            if data.draw(st.booleans()):
                dirty[key][i, t] = data.draw(st.sampled_from(GARBAGE + [0.0, 7.5]))
    loss, grad, _ = _verl_loss(dirty)
    expected, expected_grad = _reference(b)
    assert abs(loss.item() - expected.item()) <= 1e-12 * max(1.0, abs(expected.item()))
    assert (grad - expected_grad).abs().max().item() <= 1e-12


def test_masked_garbage_in_rollout_is_weights_changes_nothing():
    """Importance weights enter only on valid tokens: garbage elsewhere gives the clean loss."""
    from test_losses import _verl_inputs as inputs
    from verl.workers.utils.losses import ppo_loss

    b = _batch(seed=5)
    weights = 0.5 + torch.rand(b["mask"].shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def run(w):
        log_prob = b["log_prob"].clone().requires_grad_(True)
        data, model_output = inputs(b, log_prob)
        data["rollout_is_weights"] = w
        loss, _ = ppo_loss(_actor_config(), model_output, data)
        loss.backward()
        return loss, log_prob.grad

    clean_loss, clean_grad = run(weights)
    dirty = weights.clone()
    dirty[~b["mask"].bool()] = math.nan
    loss, grad = run(dirty)
    assert torch.isfinite(loss) and torch.equal(loss, clean_loss) and torch.equal(grad, clean_grad)
    assert not torch.equal(run(weights * 2)[0], clean_loss)  # the weights do reach the loss


def test_other_policy_losses_get_verl_own_ppo_loss_untouched():
    """The selection applies to an ``rfpp`` actor only: for verl's ``vanilla`` the batch reaches
    verl's ``ppo_loss`` as given (verl's own behaviour, NaN included, is not ours to change)."""
    actor = _actor_config()
    vanilla = dataclasses.replace(actor, policy_loss=dataclasses.replace(actor.policy_loss, loss_mode="vanilla"))
    b = _dirty(_batch(seed=3), "ref", -math.inf, [(0, 1)])
    loss, _, _ = _verl_loss(b, config=vanilla)
    assert math.isnan(loss.item())


def test_select_masked_inputs_reads_nested_batches():
    """verl's no-padding layout (jagged nested tensors): masked slots become 0, padded as
    ``ppo_loss`` pads them; the mask and other fields are left as they were."""
    from tensordict import TensorDict

    from verl_rfpp.adapter.actor_loss import select_masked_inputs

    def nested(rows, dtype):
        return torch.nested.as_nested_tensor([torch.tensor(row, dtype=dtype) for row in rows], layout=torch.jagged)

    mask = nested([[1, 0, 1], [1], [0, 0]], torch.int64)
    ref = nested([[0.5, -math.inf, 1.5], [2.0], [math.nan, 1e30]], torch.float32)
    data = TensorDict({"response_mask": mask, "ref_log_prob": ref}, batch_size=[3])
    selected = select_masked_inputs(data)
    assert torch.equal(selected["ref_log_prob"], torch.tensor([[0.5, 0.0, 1.5], [2.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    assert selected["response_mask"] is mask and data["ref_log_prob"] is ref


def test_the_plugin_wraps_ppo_loss_where_verl_binds_it():
    """verl's engine workers bind ``ppo_loss`` by name at import: they hold our wrapper."""
    import verl.workers.engine_workers as engine_workers
    import verl.workers.utils.losses as verl_losses

    from verl_rfpp import plugin

    assert getattr(verl_losses.ppo_loss, plugin.MARKER, False)
    assert engine_workers.ppo_loss is verl_losses.ppo_loss
    assert plugin.hooks_status()["ppo_loss reads no masked slot (rfpp actor)"]


@pytest.mark.parametrize("layout", ["padded", "nested"])
def test_nan_in_a_float_response_mask_is_refused_in_the_loss_path(layout):
    """verl's ``ppo_loss`` reads the mask as ``.to(bool)``, so a NaN counted as a valid token; for
    an ``rfpp`` actor it is the estimators' refusal (``inputs.check_response_mask``), naming the
    first NaN, and so is the engine's response count (docs/contract.md sections 1.6, 9.5)."""
    from verl_rfpp.errors import RfppInputError
    from verl_rfpp.losses import responses_with_valid_tokens

    b = _batch(seed=3)
    b["mask"][2, 1] = math.nan
    with pytest.raises(RfppInputError, match=r"response_mask holds NaN \(first at row 2, position 1\)"):
        _verl_loss(b)
    mask = b["mask"]
    if layout == "nested":
        rows = [mask[i, : int(b["lengths"][i])] for i in range(len(mask))]
        mask = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
    with pytest.raises(RfppInputError, match=r"response_mask holds NaN \(first at row 2, position 1\)"):
        responses_with_valid_tokens(mask)
