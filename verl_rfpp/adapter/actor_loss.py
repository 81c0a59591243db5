"""verl's actor loss: the registry slot of policy-loss mode ``rfpp`` (``verl_rfpp.losses.rfpp_policy_loss``,
docs/contract.md section 5), and verl's ``ppo_loss`` reading no masked slot for an ``rfpp`` actor
(section 1.3)."""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from verl_rfpp import losses
from verl_rfpp.adapter.patching import Internal, marked
from verl_rfpp.catalog import POLICY_LOSS_MODE
from verl_rfpp.core import inputs

LOSSES = "verl.workers.utils.losses"  # ppo_loss: policy loss + verl's entropy and k2 terms
# bind it by name at import (the engine workers before the plugin could wrap it, were it not for the table)
PPO_LOSS_IMPORTERS = ("verl.workers.engine_workers", "verl.trainer.distillation.losses", "verl.trainer.distillation")
# The per-token inputs ppo_loss reads from the batch. verl's own terms (the k2 loss, the entropy
# bonus) reduce through ``agg_loss``, which multiplies by the mask: a NaN/Inf there reaches the loss.
MASKED_INPUTS = ("old_log_probs", "ref_log_prob", "advantages", "rollout_is_weights")


def is_rfpp_actor(config: Any) -> bool:
    """Whether an ``ActorConfig`` (or its OmegaConf node) selects policy-loss mode ``rfpp``."""
    policy = getattr(config, "policy_loss", None)
    mode = policy.get("loss_mode", None) if policy is not None else None
    return mode == POLICY_LOSS_MODE

# What ``select_masked_inputs`` and ``with_response_count`` rely on in verl's ppo_loss path.
PPO_LOSS_INTERNALS = (
    Internal(LOSSES, "ppo_loss", ("config", "model_output", "data")),
    Internal("verl.utils.tensordict_utils", "get_non_tensor_data", ("data", "key", "default")),
    Internal("verl.utils.tensordict_utils", "assign_non_tensor"),
)

CORE_ALGOS = "verl.trainer.ppo.core_algos"
INTERNALS = (
    Internal(CORE_ALGOS, "POLICY_LOSS_REGISTRY", kind=dict),
    Internal(CORE_ALGOS, "get_policy_loss_fn"),
)


def select_masked_inputs(data: Any) -> Any:
    """A shallow copy of verl's batch ``data`` (a TensorDict) whose ``MASKED_INPUTS`` hold ``+0.0``
    at every position where ``response_mask`` is 0, padded as ``ppo_loss`` pads them.

    ``ppo_loss`` adds ``agg_loss(kl_penalty(log_prob, ref_log_prob) ...)``, which multiplies the
    per-token k2 values by the mask: ``-inf`` in a masked ``ref_log_prob`` gives ``inf * 0 = NaN``
    in the loss, and a NaN gradient even when the product is selected afterwards. Selecting the
    inputs first keeps every masked slot out of the loss and its gradient (docs/contract.md 1.3).
    """
    present = [key for key in MASKED_INPUTS if key in data]
    if not present:
        return data
    padded = data.select("response_mask", *present).to_padded_tensor()
    valid = padded["response_mask"].bool()
    selected = data.copy()
    for key in present:
        selected[key] = torch.where(valid, padded[key], 0.0)
    return selected


def with_response_count(data: Any) -> Any:
    """``data`` with ``global_batch_size`` set to its responses (floored at 1) when verl gave none
    (a direct call, one rank): verl's ``agg_loss`` would divide the k2 term of an all-masked batch
    by 0; the engine's train_batch sets it on every training path (docs/contract.md section 5.2)."""
    import verl.utils.tensordict_utils as tu

    if tu.get_non_tensor_data(data=data, key="global_batch_size", default=None) is not None:
        return data
    responses = max(int(losses.responses_with_valid_tokens(data["response_mask"])), 1)
    counted = data.copy()
    tu.assign_non_tensor(counted, global_batch_size=responses)
    return counted


def _selecting_masked_inputs(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def ppo_loss(config: Any, model_output: Any, data: Any, *args: Any, **kwargs: Any) -> Any:
        if is_rfpp_actor(config):
            inputs.check_response_mask(data["response_mask"])  # verl reads it as .to(bool): NaN is valid
            data = with_response_count(select_masked_inputs(data))
        return original(config, model_output, data, *args, **kwargs)

    return marked(ppo_loss)
